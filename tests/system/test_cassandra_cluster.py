"""A real 3-node cluster on 127.0.0.1-3 survives the graceful loss of one node at QUORUM.

The queue's clients and Spark queries through a node SIGKILLed, frozen and a rolling restart
are in test_cassandra_cluster_spark.py, on the same cluster (the ``cluster3`` fixture).

The cluster uses its own ports (CQL 19042, storage 17000) and directory (.cassandra/cluster), so it
runs beside the single development node on 127.0.0.1:9042/7000.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from cassandra import ConsistencyLevel, Unavailable
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import RoundRobinPolicy, WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement
from support.cluster_faults import (
    CLUSTER_NODES,
    Faults,
    eventually,
)

from cassieq_dev.local_cassandra import LocalCassandra

pytestmark = [pytest.mark.cluster]

NODES = CLUSTER_NODES


@pytest.fixture(scope="module")
def local_cluster(cluster3: Faults) -> LocalCassandra:
    return cluster3.cluster


@pytest.fixture(scope="module")
def driver(local_cluster: LocalCassandra) -> Iterator[Cluster]:
    profile = ExecutionProfile(
        load_balancing_policy=RoundRobinPolicy(),
        consistency_level=ConsistencyLevel.QUORUM,
        request_timeout=20,
    )
    cluster = Cluster(
        local_cluster.contact_points,
        port=local_cluster.port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
    )
    try:
        yield cluster
    finally:
        cluster.shutdown()


def hosts_up(driver: Cluster) -> dict[str, bool]:
    return {h.address: bool(h.is_up) for h in driver.metadata.all_hosts()}


def read_all(session: Session, table: str, cl: int) -> dict[int, str]:
    stmt = SimpleStatement(f"SELECT id, body FROM {table}", consistency_level=cl)
    return {row.id: row.body for row in session.execute(stmt)}


def test_quorum_survives_one_node_down_and_the_node_rejoins(
    local_cluster: LocalCassandra, driver: Cluster
) -> None:
    session = driver.connect()
    peers = {row.peer for row in session.execute("SELECT peer FROM system.peers")}
    assert len(peers) == NODES - 1, peers
    eventually(lambda: all(hosts_up(driver).values()) and len(hosts_up(driver)) == NODES)

    keyspace = f"cluster_{uuid.uuid4().hex[:12]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    table = f"{keyspace}.messages"
    session.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body text)")
    insert = session.prepare(f"INSERT INTO {table} (id, body) VALUES (?, ?)")
    insert.consistency_level = ConsistencyLevel.QUORUM

    expected = {i: f"before-{i}" for i in range(20)}
    for key, body in expected.items():
        session.execute(insert, (key, body))
    assert read_all(session, table, ConsistencyLevel.QUORUM) == expected
    assert read_all(session, table, ConsistencyLevel.ALL) == expected

    # Graceful stop of node 3: QUORUM (2 of 3) keeps working, ALL cannot.
    assert local_cluster.stop_node(3)
    assert not local_cluster.is_node_running(3)
    eventually(lambda: hosts_up(driver).get("127.0.0.3") is False)
    for i in range(20, 40):
        expected[i] = f"during-{i}"
        session.execute(insert, (i, expected[i]))
    assert read_all(session, table, ConsistencyLevel.QUORUM) == expected
    with pytest.raises(Unavailable):
        read_all(session, table, ConsistencyLevel.ALL)

    # Node 3 comes back with its old data and token, and the ring is whole again.
    ready = local_cluster.start_node(3)
    assert not ready.already_running
    assert local_cluster.is_running()
    eventually(lambda: all(hosts_up(driver).values()) and len(hosts_up(driver)) == NODES)
    assert eventually(lambda: read_all(session, table, ConsistencyLevel.ALL)) == expected

    # The rejoined node serves reads itself, through its own coordinator.
    only_node3 = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy(["127.0.0.3"]),
        consistency_level=ConsistencyLevel.ONE,
    )
    node3 = Cluster(
        ["127.0.0.3"],
        port=local_cluster.port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: only_node3},
    )
    try:
        local = node3.connect()
        me = local.execute("SELECT broadcast_address FROM system.local").one()
        assert me.broadcast_address == "127.0.0.3"
        peers3 = {row.peer for row in local.execute("SELECT peer FROM system.peers")}
        assert peers3 == {"127.0.0.1", "127.0.0.2"}
        assert read_all(local, table, ConsistencyLevel.ALL) == expected
    finally:
        node3.shutdown()
    session.execute(f"DROP KEYSPACE {keyspace}")
