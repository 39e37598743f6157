"""Message groups came in the schema version after the service's: ``bootstrap`` adds the ``grp``
column and the ``group_heads`` table to a keyspace the previous version made, keeping its
queues and messages, and the messages put before the migration are delivered as ungrouped."""

from __future__ import annotations

from support.schema_versions import keyspace_before

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import schema


def test_bootstrap_migrates_the_previous_version_s_keyspace_to_message_groups(cassandra, keyspace):
    session = cassandra.session()
    keyspace_before(session, keyspace, schema.GROUPS_MIGRATION)
    opts = {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": keyspace,
    }
    # a message written as the previous version wrote them (no grp column)
    session.execute(
        f"INSERT INTO {keyspace}.queues (name, queue_id, bucket_size, max_delivery_count, "
        "visibility_timeout, repair_timeout) VALUES ('kept', uuid(), 10, 5, 30, 15)"
    )
    with QueueClient.from_options(opts) as old:
        try:
            old.put("kept", b"x", group="g")
            raise AssertionError("the previous version's keyspace was used without migrating")
        except Exception as exc:
            assert "bootstrap" in str(exc)
    with QueueClient.from_options(opts) as client:
        assert client.bootstrap() == schema.SCHEMA_VERSION
        assert client.bootstrap() == schema.SCHEMA_VERSION  # idempotent
        assert [q.name for q in client.list_queues()] == ["kept"]
    session.cluster.refresh_schema_metadata()
    ks = session.cluster.metadata.keyspaces[keyspace]
    assert "group_heads" in ks.tables
    assert "grp" in ks.tables["messages"].columns
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
