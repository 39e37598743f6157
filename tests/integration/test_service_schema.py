"""The service's tables are schema version 8, which ``bootstrap`` adds to a keyspace that
version 7 made, keeping what was there."""

from __future__ import annotations

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import schema


def test_bootstrap_migrates_a_version_7_keyspace_to_the_service_tables(cassandra, keyspace):
    session = cassandra.session()
    for version in range(1, 8):  # exactly what a version-7 bootstrap applied
        for statement in schema.MIGRATIONS[version]:
            session.execute(statement.replace("{ks}.", f"{keyspace}."))
    session.execute(
        f"INSERT INTO {keyspace}.schema_version (component, version) VALUES ('cassieq', 7)"
    )
    cassandra_opts = {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": keyspace,
    }
    with QueueClient.from_options(cassandra_opts) as old:
        # a version-7 keyspace refuses a version-8 client until it is migrated
        try:
            old.create_queue("before")
            raise AssertionError("a version-7 keyspace was used without migrating")
        except Exception as exc:
            assert "bootstrap" in str(exc)
    session.execute(
        f"INSERT INTO {keyspace}.queues (name, queue_id, bucket_size, max_delivery_count, "
        "visibility_timeout, repair_timeout) VALUES ('kept', uuid(), 10, 5, 30, 15)"
    )
    with QueueClient.from_options(cassandra_opts) as client:
        assert client.bootstrap() == schema.SCHEMA_VERSION >= 8
        assert client.bootstrap() == schema.SCHEMA_VERSION  # idempotent
        assert [q.name for q in client.list_queues()] == ["kept"]
    session.cluster.refresh_schema_metadata()
    tables = set(session.cluster.metadata.keyspaces[keyspace].tables)
    assert {"service_accounts", "service_account_keys", "service_leases"} <= tables
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
