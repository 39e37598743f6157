"""Queue settings that change are schema version 9 (``queues.settings_version`` and
``queues.updated_at``), which ``bootstrap`` adds to a keyspace that version 8 made, keeping
its queues and their messages."""

from __future__ import annotations

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import schema


def test_bootstrap_migrates_a_version_8_keyspace_keeping_its_queues(cassandra, keyspace):
    session = cassandra.session()
    for version in range(1, 9):  # exactly what a version-8 bootstrap applied
        for statement in schema.MIGRATIONS[version]:
            session.execute(statement.replace("{ks}.", f"{keyspace}."))
    session.execute(
        f"INSERT INTO {keyspace}.schema_version (component, version) VALUES ('cassieq', 8)"
    )
    opts = {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": keyspace,
    }
    with QueueClient.from_options(opts) as old:
        # a version-8 keyspace refuses a version-9 client until it is migrated
        try:
            old.create_queue("before")
            raise AssertionError("a version-8 keyspace was used without migrating")
        except Exception as exc:
            assert "bootstrap" in str(exc)
    session.execute(
        f"INSERT INTO {keyspace}.queues (name, queue_id, bucket_size, max_delivery_count, "
        "visibility_timeout, repair_timeout) VALUES ('kept', uuid(), 10, 5, 30, 15)"
    )
    with QueueClient.from_options(opts) as client:
        assert client.bootstrap() == schema.SCHEMA_VERSION >= 9
        assert client.bootstrap() == schema.SCHEMA_VERSION  # idempotent
        assert [q.name for q in client.list_queues()] == ["kept"]
        # a queue made before the migration is usable as it was
        client.create_queue("after")
        mid = client.put("after", b"x")
        got = client.get("after")
        assert got is not None and got.id == mid and client.ack("after", got.pop_receipt)
    session.cluster.refresh_schema_metadata()
    columns = session.cluster.metadata.keyspaces[keyspace].tables["queues"].columns
    assert {"settings_version", "updated_at"} <= set(columns)
    row = session.execute(
        f"SELECT settings_version, updated_at FROM {keyspace}.queues WHERE name = 'kept'"
    ).one()
    assert row.settings_version is None and row.updated_at is None  # never updated
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
