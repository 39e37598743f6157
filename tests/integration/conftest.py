"""Fixtures for integration tests of the queue: one bootstrapped keyspace per test session
(schema changes take seconds each), a fresh queue name per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from cassieq_spark import QueueClient

TEST_KEYSPACE = "cassieq_test"


@pytest.fixture(scope="session")
def cassieq_options(cassandra) -> dict[str, str]:
    """Spark-style connection options for the Cassandra under test (also for subprocesses)."""
    return {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": TEST_KEYSPACE,
    }


@pytest.fixture(scope="session")
def queue_client(cassieq_options) -> Iterator[QueueClient]:
    client = QueueClient.from_options(cassieq_options)
    client.bootstrap(create_keyspace=True)
    yield client
    client.close()


@pytest.fixture
def queue_name(queue_client) -> str:
    """A unique queue name; the queue itself is not created (tests choose its settings)."""
    return f"t_{uuid.uuid4().hex[:12]}"
