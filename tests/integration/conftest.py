"""Fixtures for integration tests of the queue: one bootstrapped keyspace per test session
(schema changes take seconds each), a fresh queue name per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from cluster_faults import (  # tests/integration is on sys.path
    CLUSTER_NODES,
    CLUSTER_PORT,
    CLUSTER_STORAGE_PORT,
    Faults,
    durable_cluster,
)

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


@pytest.fixture(scope="session")
def cluster3() -> Iterator[Faults]:
    """A durable 3-node Cassandra on 127.0.0.1-3 (CQL 19042), shared by the cluster tests
    (starting one takes a minute or two), with the fault harness on it."""
    cluster = durable_cluster(CLUSTER_NODES, CLUSTER_PORT, CLUSTER_STORAGE_PORT, "cluster")
    with cluster:  # stops only the nodes this session started
        faults = Faults(cluster)
        try:
            faults.wait_all_up()
            yield faults
        finally:
            faults.close()


@pytest.fixture(scope="module")
def sspark(spark):
    """The shared local SparkSession with the cassieq data source registered."""
    from cassieq_spark.spark import register

    register(spark)
    return spark
