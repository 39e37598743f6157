"""Bad input gets a clear error naming what is wrong; bootstrap is idempotent."""

from __future__ import annotations

import pytest

from cassieq_spark import (
    ConfigError,
    PayloadTooLargeError,
    QueueClient,
    QueueExistsError,
    QueueNotFoundError,
    SchemaNotBootstrappedError,
)
from cassieq_spark.engine.store.schema import SCHEMA_VERSION


def test_unknown_queue_is_named(queue_client, queue_name):
    for call in (
        lambda: queue_client.put(queue_name, b"x"),
        lambda: queue_client.get(queue_name),
        lambda: queue_client.stats(queue_name),
        lambda: queue_client.delete_queue(queue_name),
    ):
        with pytest.raises(QueueNotFoundError, match=f"queue '{queue_name}' does not exist"):
            call()


@pytest.mark.parametrize("bad", ["", "has space", "-dash-first", "semi;colon", "x" * 201, 7])
def test_invalid_queue_name(queue_client, bad):
    with pytest.raises(ConfigError, match="invalid queue name"):
        queue_client.create_queue(bad)


def test_existing_queue(queue_client, queue_name):
    queue_client.create_queue(queue_name, visibility_timeout=7)
    with pytest.raises(QueueExistsError, match="already exists"):
        queue_client.create_queue(queue_name)
    assert queue_client.create_queue(queue_name, exist_ok=True).visibility_timeout == 7


def test_negative_delays_and_timeouts(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    with pytest.raises(ConfigError, match="delay must be a finite number of seconds >= 0"):
        queue_client.put(queue_name, b"x", delay=-1)
    with pytest.raises(ConfigError, match="delay"):
        queue_client.put_many(queue_name, [b"x"], delay=float("nan"))
    with pytest.raises(ConfigError, match="visibility timeout"):
        queue_client.get(queue_name, visibility_timeout=-5)
    with pytest.raises(ConfigError, match="visibility timeout must be > 0"):
        queue_client.get(queue_name, visibility_timeout=0)
    with pytest.raises(ConfigError, match="visibility timeout"):
        queue_client.create_queue(queue_name + "v", visibility_timeout=-1)
    with pytest.raises(ConfigError, match="repair timeout"):
        queue_client.create_queue(queue_name + "r", repair_timeout=-1)
    queue_client.put(queue_name, b"x")
    msg = queue_client.get(queue_name)
    with pytest.raises(ConfigError, match="timeout must be a finite number"):
        queue_client.change_visibility(queue_name, msg.pop_receipt, -1)
    assert queue_client.stats(queue_name)["enqueued"] == 1  # the bad puts wrote nothing


def test_oversize_payload(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    with pytest.raises(PayloadTooLargeError, match="1048577 bytes.*at most 1048576"):
        queue_client.put(queue_name, b"x" * (1024 * 1024 + 1))
    small = queue_name + "s"
    queue_client.create_queue(small, max_payload_bytes=100)
    queue_client.put(small, b"y" * 100)
    with pytest.raises(PayloadTooLargeError, match="position 1 has 101 bytes"):
        queue_client.put_many(small, [b"ok", b"y" * 101])
    with pytest.raises(ConfigError, match="payload at position 0 must be bytes or str"):
        queue_client.put_many(small, [12])
    assert queue_client.stats(small)["enqueued"] == 1


@pytest.mark.parametrize("size", [0, -1, 100_001, 2.5])
def test_bucket_size_out_of_range(queue_client, queue_name, size):
    with pytest.raises(ConfigError, match="bucket size must be an integer from 1 to 100000"):
        queue_client.create_queue(queue_name, bucket_size=size)


def test_other_bad_settings(queue_client, queue_name):
    with pytest.raises(ConfigError, match="max delivery count"):
        queue_client.create_queue(queue_name, max_delivery_count=0)
    with pytest.raises(ConfigError, match="own dead-letter queue"):
        queue_client.create_queue(queue_name, dead_letter_queue=queue_name)
    with pytest.raises(ConfigError, match="limit"):
        queue_client.create_queue(queue_name)
        queue_client.peek(queue_name, limit=0)


def test_schema_not_bootstrapped_then_bootstrap_twice(cassandra, keyspace):
    with QueueClient.connect(cassandra.contact_points, cassandra.port, keyspace=keyspace) as c:
        for call in (c.list_queues, lambda: c.create_queue("q"), lambda: c.get_queue("q")):
            with pytest.raises(SchemaNotBootstrappedError, match="cassieq bootstrap"):
                call()
        assert c.bootstrap() == SCHEMA_VERSION
        assert c.bootstrap() == SCHEMA_VERSION  # idempotent
        row = c.conn.session.execute(
            f"SELECT version, applied_at FROM {keyspace}.schema_version WHERE component = 'cassieq'"
        ).one()
        assert row.version == SCHEMA_VERSION and row.applied_at is not None
        c.create_queue("q")
        assert c.put("q", b"x") == 0
        assert c.bootstrap() == SCHEMA_VERSION  # a re-run keeps the data
        assert c.get("q").payload == b"x"


def test_missing_keyspace(cassandra):
    with QueueClient.connect(cassandra.contact_points, cassandra.port, keyspace="no_such_ks") as c:
        with pytest.raises(
            SchemaNotBootstrappedError, match="keyspace 'no_such_ks' does not exist"
        ):
            c.bootstrap()
        with pytest.raises(SchemaNotBootstrappedError, match="not bootstrapped"):
            c.list_queues()
