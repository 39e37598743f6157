"""The stream's read tallies are the schema version after message groups': ``bootstrap`` adds the
``stream_tallies`` table to a keyspace the previous version made (and every later version's
changes), keeping its queues and messages; a stream on the migrated keyspace delivers and acks
them."""

from __future__ import annotations

import pytest
from support.driver import Driver

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import schema
from cassieq_spark.errors import SchemaNotBootstrappedError

pytestmark = [pytest.mark.integration]


def test_bootstrap_migrates_the_previous_version_s_keyspace_to_stream_tallies(cassandra, keyspace):
    session = cassandra.session()
    tallies = next(v for v, m in schema.MIGRATIONS.items() if m == schema.STREAM_TALLIES_MIGRATION)
    previous = max(v for v in schema.MIGRATIONS if v < tallies)
    opts = {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": keyspace,
    }
    # The previous version's keyspace, with a queue and messages: every table but the new one,
    # and the previous version recorded.
    with QueueClient.from_options(opts) as client:
        client.bootstrap(create_keyspace=True)
        client.create_queue("kept", bucket_size=10)
        ids = client.put_many("kept", [b"a", b"b", b"c"])
    session.execute(f"DROP TABLE {keyspace}.stream_tallies")
    session.execute(f"DELETE FROM {keyspace}.schema_version WHERE component = 'cassieq'")
    session.execute(
        f"INSERT INTO {keyspace}.schema_version (component, version) VALUES ('cassieq', %s)",
        (previous,),
    )
    with (
        QueueClient.from_options(opts) as old,
        pytest.raises(SchemaNotBootstrappedError, match="bootstrap"),
    ):
        old.put("kept", b"x")
    with QueueClient.from_options(opts) as client:
        assert client.bootstrap() == schema.SCHEMA_VERSION
        assert client.bootstrap() == schema.SCHEMA_VERSION  # idempotent
        assert [q.name for q in client.list_queues()] == ["kept"]
        d = Driver({**opts, "queue": "kept"}, consumerId="migrated")
        try:
            d.start()
            d.drain()
            assert sorted(d.delivered) == ids
        finally:
            d.reader.stop()
        st = client.stats("kept")
        assert st["acked"] == 3 and st["backlog"] == 0, st
        queue_id = client.get_queue("kept").queue_id
    session.cluster.refresh_schema_metadata()
    assert "stream_tallies" in session.cluster.metadata.keyspaces[keyspace].tables
    rows = session.execute(
        f"SELECT plain FROM {keyspace}.stream_tallies WHERE queue_id = %s ALLOW FILTERING",
        (queue_id,),
    )
    assert sum(r.plain for r in rows) == 3  # the stream's tasks recorded what they read
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
