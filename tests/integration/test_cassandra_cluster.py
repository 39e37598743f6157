"""A real 3-node cluster on 127.0.0.1-3 survives the graceful loss of one node at QUORUM, and the
queue's clients ride through a node killed with SIGKILL and restarted.

The cluster uses its own ports (CQL 19042, storage 17000) and directory (.cassandra/cluster), so it
runs beside the single development node on 127.0.0.1:9042/7000.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from cassandra import ConsistencyLevel, Unavailable
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import RoundRobinPolicy, WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

from cassieq_spark.local_cassandra import STATE_DIR, LocalCassandra

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CLUSTER_PORT = 19042
CLUSTER_STORAGE_PORT = 17000
NODES = 3
T = TypeVar("T")


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[LocalCassandra]:
    cluster = LocalCassandra(
        nodes=NODES,
        port=CLUSTER_PORT,
        storage_port=CLUSTER_STORAGE_PORT,
        heap="384M",
        base_dir=STATE_DIR / "cluster",
        durable=True,  # a SIGKILLed node must come back with what it acknowledged
    )
    if not any(cluster.is_node_running(i) for i in range(1, NODES + 1)):
        cluster.wipe()  # a fresh ring every time nobody is using it
    with cluster:  # stops only the nodes this test started
        yield cluster


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


def eventually(check: Callable[[], T], timeout: float = 90.0, interval: float = 1.0) -> T:
    """Call ``check`` until it returns a truthy value without raising; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
            last: object = result
        except Exception as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"still failing after {timeout:.0f} s: {last!r}")
        time.sleep(interval)


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

MAX_SECONDS = 420.0
# Per producer: bounds the backlog the consumers drain after the fault, however long it took.
PRODUCER_MESSAGES = 600


def _produce(options: dict[str, str], queue: str, tag: str, stop, out) -> None:
    from cassieq_spark import QueueClient

    sent: list[str] = []
    errors: list[str] = []
    with QueueClient.from_options(options) as client:
        i = 0
        while not stop.is_set():
            if len(sent) >= PRODUCER_MESSAGES:  # enough; the fault may still be under way
                time.sleep(0.2)
                continue
            batch = [f"{tag}-{i}-{k}" for k in range(5 if i % 2 else 1)]
            try:
                if len(batch) == 1:
                    client.put(queue, batch[0].encode())
                else:
                    client.put_many(queue, [b.encode() for b in batch])
                sent.extend(batch)
            except Exception as exc:  # the test fails on any; it records which
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            i += 1
            time.sleep(0.15)  # about what two consumers keep up with on this machine
    out.put(("producer", sent, errors))


def _consume(options: dict[str, str], queue: str, stop, out) -> None:
    from cassieq_spark import QueueClient

    acked: list[tuple[str, int, float]] = []
    errors: list[str] = []
    with QueueClient.from_options(options) as client:
        idle_since = None
        started = time.monotonic()
        while time.monotonic() - started < MAX_SECONDS:
            try:
                msg = client.get(queue, visibility_timeout=60)
                if msg is None:
                    idle_since = idle_since or time.monotonic()
                    if stop.is_set() and time.monotonic() - idle_since > 8:
                        break
                    time.sleep(0.1)
                    continue
                idle_since = None
                if client.ack(queue, msg.pop_receipt):
                    acked.append((msg.text, msg.id, time.time()))
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
    out.put(("consumer", acked, errors))


def _clients_through(local_cluster: LocalCassandra, fault: Callable[[], None]) -> float:
    """Run 2 producer and 2 consumer processes on RF=3 around ``fault()``; check that no error
    reached them, nothing was enqueued twice, everything sent was acked exactly once. Returns the
    longest pause between two acks (seconds): what the fault cost the consumers."""
    import collections
    import multiprocessing as mp

    from cassieq_spark import QueueClient

    options = {
        "contactPoints": ",".join(local_cluster.contact_points),
        "port": str(local_cluster.port),
        "keyspace": "cassieq_cluster",
    }
    with QueueClient.from_options(options) as admin:
        admin.bootstrap(create_keyspace=True, replication_factor=3)
        queue = f"q_{uuid.uuid4().hex[:10]}"
        admin.create_queue(queue)
    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_produce, args=(options, queue, f"p{i}", stop, out)) for i in range(2)
    ]
    procs += [ctx.Process(target=_consume, args=(options, queue, stop, out)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        time.sleep(8)  # traffic first
        fault()
        time.sleep(8)  # and after
    finally:
        stop.set()
    results = [out.get(timeout=MAX_SECONDS) for _ in procs]
    for p in procs:
        p.join(30)
    sent = [s for kind, s, _ in results if kind == "producer" for s in s]
    acked = [a for kind, a, _ in results if kind == "consumer" for a in a]
    errors = [e for _, _, errs in results for e in errs]
    kinds = collections.Counter(e.split(":")[0] for e in errors)
    assert errors == [], f"{len(errors)} errors reached the callers {dict(kinds)}: {errors[:3]}"
    assert len(sent) == len(set(sent)) and len(sent) > 100
    ids_per_payload = collections.defaultdict(set)
    for payload, mid, _ in acked:
        ids_per_payload[payload].add(mid)
    duplicated = {p: ids for p, ids in ids_per_payload.items() if len(ids) > 1}
    assert duplicated == {}, f"{len(duplicated)} payloads enqueued twice"
    acks = collections.Counter(payload for payload, _, _ in acked)
    assert [p for p, n in acks.items() if n > 1] == []
    missing = set(sent) - set(acks)
    assert missing == set(), f"{len(missing)} of {len(sent)} never delivered"
    times = sorted(at for _, _, at in acked)
    gap = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
    print(f"{len(sent)} messages, longest pause between acks {gap:.1f} s")
    return gap


def test_clients_ride_through_a_killed_node_without_error_duplicate_or_loss(
    local_cluster: LocalCassandra,
) -> None:
    """Node 3 SIGKILLed mid-traffic and restarted 17 s later."""
    import os
    import signal

    def kill_and_restart() -> None:
        pid = local_cluster.pid(3)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(17)
        local_cluster.start_node(3)

    _clients_through(local_cluster, kill_and_restart)


def test_clients_ride_through_a_paused_node_and_a_rolling_restart(
    local_cluster: LocalCassandra,
) -> None:
    """Node 2 frozen for 10 s (SIGSTOP: a long GC pause), then every node restarted in turn."""
    import os
    import signal

    def pause_then_roll() -> None:
        pid = local_cluster.pid(2)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(10)
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(5)
        for index in (3, 2, 1):
            assert local_cluster.stop_node(index)
            local_cluster.start_node(index)

    _clients_through(local_cluster, pause_then_roll)
