"""A real 3-node cluster on 127.0.0.1-3 survives the graceful loss of one node at QUORUM, and the
queue's clients ride through a node killed with SIGKILL and restarted.

The cluster uses its own ports (CQL 19042, storage 17000) and directory (.cassandra/cluster), so it
runs beside the single development node on 127.0.0.1:9042/7000.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from cassandra import ConsistencyLevel, Unavailable
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import RoundRobinPolicy, WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement
from cluster_faults import (  # tests/integration is on sys.path
    CLUSTER_NODES,
    Faults,
    check_client_traffic,
    consume,
    eventually,
    produce,
)

from cassieq_spark.local_cassandra import LocalCassandra

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

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


# -- the queue's clients through node failures ----------------------------------------------------


def _clients_through(cluster3: Faults, fault: Callable[[], None]) -> float:
    """Run 2 producer and 2 consumer processes on RF=3 around ``fault()``; check that no error
    reached them, nothing was enqueued twice, everything sent was acked exactly once. Returns the
    longest pause between two acks (seconds): what the fault cost the consumers."""
    import multiprocessing as mp

    from cassieq_spark import QueueClient

    options = cluster3.client_options("cassieq_cluster")
    with QueueClient.from_options(options) as admin:
        admin.bootstrap(create_keyspace=True, replication_factor=3)
        queue = f"q_{uuid.uuid4().hex[:10]}"
        admin.create_queue(queue)
    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=produce, args=(options, queue, f"p{i}", stop, out)) for i in range(2)
    ]
    procs += [ctx.Process(target=consume, args=(options, queue, stop, out)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        time.sleep(8)  # traffic first
        fault()
        time.sleep(8)  # and after
    finally:
        stop.set()
    results = [out.get(timeout=700) for _ in procs]
    for p in procs:
        p.join(30)
    figures = check_client_traffic(results)
    print(f"{figures['messages']} messages, longest pause between acks "
          f"{figures['longest_ack_pause_s']} s")  # fmt: skip
    return float(figures["longest_ack_pause_s"])


def test_clients_ride_through_a_killed_node_without_error_duplicate_or_loss(
    cluster3: Faults,
) -> None:
    """Node 3 SIGKILLed mid-traffic and restarted 17 s later."""

    def kill_and_restart() -> None:
        cluster3.kill(3)
        time.sleep(17)
        cluster3.restart(3)

    _clients_through(cluster3, kill_and_restart)


def test_clients_ride_through_a_paused_node_and_a_rolling_restart(cluster3: Faults) -> None:
    """Node 2 frozen for 10 s (SIGSTOP: a long GC pause), then every node restarted in turn."""

    def pause_then_roll() -> None:
        with cluster3.frozen(2):
            time.sleep(10)
        time.sleep(5)
        for index in (3, 2, 1):
            cluster3.stop(index)
            cluster3.restart(index)

    _clients_through(cluster3, pause_then_roll)
