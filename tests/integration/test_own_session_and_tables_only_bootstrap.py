"""A client over a driver session the caller made: it runs with the caller's cluster and a copy
of the named execution profile at the queue's consistency levels, refuses an unknown profile
by listing the known ones, and never shuts the caller's session down. ``bootstrap --no-create``
creates the tables of a keyspace made elsewhere and names a missing keyspace. An auth provider
object reaches the driver. Real Cassandra."""

from __future__ import annotations

import uuid

import pytest
from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile

from cassieq_spark import QueueClient
from cassieq_spark.engine.store.schema import SCHEMA_VERSION
from cassieq_spark.errors import ConfigError, SchemaNotBootstrappedError

pytestmark = pytest.mark.integration


@pytest.fixture
def own_session(cassieq_options):
    """A session as an application makes it: its own profiles, one of them at ONE."""
    cluster = Cluster(
        contact_points=cassieq_options["contactPoints"].split(","),
        port=int(cassieq_options["port"]),
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(request_timeout=30),
            "fast": ExecutionProfile(consistency_level=ConsistencyLevel.ONE, request_timeout=7),
        },
        protocol_version=4,
    )
    session = cluster.connect()
    try:
        yield session
    finally:
        cluster.shutdown()


def test_a_client_over_your_session_uses_its_profile_at_a_quorum_and_leaves_it_open(
    own_session, queue_client, queue_name, cassieq_options
):
    keyspace = cassieq_options["keyspace"]
    q = QueueClient.from_session(own_session, keyspace, execution_profile="fast")
    assert q.conn.profile.consistency_level == ConsistencyLevel.LOCAL_QUORUM
    assert q.conn.profile.request_timeout == 7  # the rest of the profile is the caller's
    assert q.conn.serial_profile.consistency_level == ConsistencyLevel.LOCAL_SERIAL
    q.create_queue(queue_name)
    ids = q.put_many(queue_name, ["a", "b"])
    got = q.get_many(queue_name, 10)
    assert sorted(m.id for m in got) == ids
    assert [r.status for r in q.ack_many(queue_name, [m.pop_receipt for m in got])] == ["ok"] * 2
    q.close()
    assert not own_session.is_shutdown
    assert own_session.execute("SELECT release_version FROM system.local").one() is not None

    with pytest.raises(ConfigError) as err:
        QueueClient.from_session(own_session, keyspace, execution_profile="nope")
    assert "'nope'" in str(err.value) and "'fast'" in str(err.value)


def test_tables_only_bootstrap_in_a_keyspace_made_elsewhere(own_session, cassieq_options, run):
    ks = f"cq_made_{uuid.uuid4().hex[:10]}"
    missing = f"cq_missing_{uuid.uuid4().hex[:10]}"
    own_session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    try:
        q = QueueClient.from_session(own_session, ks)
        assert q.bootstrap(tables_only=True) == SCHEMA_VERSION
        q.create_queue("jobs")
        q.put("jobs", "x")
        assert q.stats("jobs")["backlog"] == 1

        with pytest.raises(SchemaNotBootstrappedError) as err:
            QueueClient.from_session(own_session, missing).bootstrap(tables_only=True)
        assert repr(missing) in str(err.value)
        done = run("bootstrap", "--no-create", env_extra={"CASSIEQ_KEYSPACE": missing})
        assert done.returncode == 1 and repr(missing) in done.stderr, done.stderr
        assert own_session.cluster.metadata.keyspaces.get(missing) is None
    finally:
        own_session.execute(f"DROP KEYSPACE IF EXISTS {ks}")


def test_an_auth_provider_object_reaches_the_driver(cassieq_options, queue_client):
    provider = PlainTextAuthProvider(username="unused", password="unused")
    with QueueClient.connect(
        cassieq_options["contactPoints"],
        port=int(cassieq_options["port"]),
        keyspace=cassieq_options["keyspace"],
        auth_provider=provider,
    ) as q:
        assert q.conn.cluster.auth_provider is provider
        assert isinstance(q.list_queues(), list)
