"""Bootstrap never leaves a keyspace half-made (finding C87 of the bad-input sweep): a
replication factor the cluster cannot serve is refused before anything is created, a keyspace
an earlier bootstrap left half-made is completed, and a keyspace whose replication the cluster
cannot serve (or differs from the one asked for) gets a message that says how to change it."""

from __future__ import annotations

import uuid

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine import schema
from cassieq_spark.errors import KeyspaceReplicationError

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh(cassandra, cassieq_options):
    """A keyspace name not in use; dropped at the end if anything created it."""
    name = f"bi_boot_{uuid.uuid4().hex[:8]}"
    client = QueueClient.from_options({**cassieq_options, "keyspace": name})
    try:
        yield name, client
    finally:
        client.close()
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)


def _exists(cassandra, name: str) -> bool:
    return (
        cassandra.session()
        .execute(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", (name,)
        )
        .one()
        is not None
    )


def _half_made(cassandra, name: str, rf: int) -> None:
    """What the failed bootstrap of C87 left: every table of version 1, no recorded version."""
    s = cassandra.session()
    s.execute(
        f"CREATE KEYSPACE {name} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}",
        timeout=60,
    )
    for statement in schema.MIGRATIONS[1]:
        s.execute(statement.replace("{ks}.", f"{name}."), timeout=60)
    s.cluster.control_connection.wait_for_schema_agreement()


def test_unservable_replication_factor_creates_nothing(fresh, cassandra):
    name, client = fresh
    with pytest.raises(
        KeyspaceReplicationError, match=r"replication factor 3 needs 3 nodes .*nothing was created"
    ):
        client.bootstrap(create_keyspace=True, replication_factor=3)
    assert not _exists(cassandra, name)
    assert client.bootstrap(create_keyspace=True) == schema.SCHEMA_VERSION  # the default: 1


def test_half_made_keyspace_is_completed(fresh, cassandra):
    name, client = fresh
    _half_made(cassandra, name, 1)
    assert schema.current_version(client.conn.session, name) == 0
    assert client.bootstrap() == schema.SCHEMA_VERSION
    assert schema.current_version(client.conn.session, name) == schema.SCHEMA_VERSION
    client.create_queue("q")
    client.put("q", b"x")
    assert client.get("q").payload == b"x"


def test_keyspace_the_cluster_cannot_serve_says_how_to_fix_it(fresh, cassandra):
    name, client = fresh
    _half_made(cassandra, name, 3)
    client.conn.cluster.refresh_schema_metadata()
    alter = rf"ALTER KEYSPACE {name} WITH replication = \{{'class': 'SimpleStrategy', 'replication_factor': 1\}}"
    with pytest.raises(
        KeyspaceReplicationError, match=r"cannot serve: replication factor 3 .*" + alter
    ):
        client.bootstrap()
    with pytest.raises(KeyspaceReplicationError, match=r"which the cluster cannot serve"):
        client.create_queue("q")  # not the driver's NoHostAvailable
    # asking for another factor is refused too: bootstrap never changes replication
    with pytest.raises(
        KeyspaceReplicationError,
        match=r"exists with replication .* not the replication factor 1 asked for",
    ):
        client.bootstrap(create_keyspace=True, replication_factor=1)
    cassandra.session().execute(
        f"ALTER KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}",
        timeout=60,
    )
    client.conn.cluster.refresh_schema_metadata()
    assert client.bootstrap(create_keyspace=True) == schema.SCHEMA_VERSION
    client.create_queue("q")
