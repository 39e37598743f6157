"""The fault harness the cluster tests share: a durable local Cassandra (3 nodes on
127.0.0.1-3, or one node) with its own ports, and the faults production brings to it: a node
SIGKILLed, frozen (SIGSTOP/SIGCONT: a long GC pause), stopped gracefully, restarted; plus
waiting until a driver sees the nodes up again, and counted client producers and consumers
that run in their own processes.

Nothing here mocks Cassandra: the nodes are real JVMs and the signals are real.
"""

from __future__ import annotations

import collections
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import ExponentialReconnectionPolicy, RoundRobinPolicy

from cassieq_dev.local_cassandra import STATE_DIR, LocalCassandra, offset_clock

T = TypeVar("T")

CLUSTER_PORT = 19042  # beside the development node on 9042/7000
CLUSTER_STORAGE_PORT = 17000
CLUSTER_NODES = 3
PROBE_KEYSPACE = "cassieq_faults_probe"
# Rows written by compare-and-sets through one chosen node, to read back the write time it
# stamped (Faults.cas_stamp_offset).
STAMPS_TABLE = f"{PROBE_KEYSPACE}.stamps"


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


def durable_cluster(
    nodes: int,
    port: int,
    storage_port: int,
    name: str,
    heap: str = "384M",
    data_centers: Sequence[tuple[str, int]] | None = None,
) -> LocalCassandra:
    """A durable local cluster (a SIGKILLed node restarts with all it acknowledged) in its own
    directory; wiped first when none of its nodes runs, so every run starts from a fresh ring.
    Each node runs in a cgroup of its own where this process may make one (for the network
    faults, support/net_faults.py). ``data_centers``: (name, nodes) pairs, in node order, for
    a cluster of several data centers (see LocalCassandra)."""
    from support.net_faults import node_cgroups

    cluster = LocalCassandra(
        nodes=nodes,
        port=port,
        storage_port=storage_port,
        heap=heap,
        base_dir=STATE_DIR / name,
        durable=True,
        cgroups=node_cgroups(name),
        data_centers=data_centers,
    )
    if not any(cluster.is_node_running(i) for i in range(1, nodes + 1)):
        cluster.wipe()
    return cluster


# A clock read whose round trip took this long or less bounds its error well enough (half of it).
GOOD_ROUND_TRIP_S = 0.1
CLOCK_SAMPLES = 5


def best_offset(sample: Callable[[], tuple[float, float, float]]) -> float:
    """A remote clock's offset from this process's, seconds, from ``sample()`` -> (the remote
    time, this process's time before the request, after the reply). The remote time was taken
    somewhere inside the round trip, so the midpoint is off by at most half of it: the sample
    with the shortest round trip of up to ``CLOCK_SAMPLES`` is used (the first one within
    ``GOOD_ROUND_TRIP_S`` ends the search): a read can wait a second or more in a queue before
    the node stamps it, on a node just restarted among busy clients."""
    best: tuple[float, float] | None = None  # (round trip, offset)
    for _ in range(CLOCK_SAMPLES):
        remote, before, after = sample()
        trip = after - before
        if best is None or trip < best[0]:
            best = (trip, remote - (before + after) / 2)
        if trip <= GOOD_ROUND_TRIP_S:
            break
    assert best is not None
    return best[1]


class Faults:
    """Faults on the nodes of ``cluster``, and a driver that watches them come and go."""

    def __init__(self, cluster: LocalCassandra):
        self.cluster = cluster
        self._paused: set[int] = set()
        profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=20)
        self.watcher = Cluster(
            cluster.contact_points,
            port=cluster.port,
            protocol_version=5,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            # Sees nodes back within seconds, also after the whole cluster was stopped.
            reconnection_policy=ExponentialReconnectionPolicy(0.5, 2.0),
        )
        self.session = self.watcher.connect()
        # A table on every node: reading it at ALL through each node in turn proves that every
        # node sees every other one alive (gossip), which a driver seeing them up does not.
        self.session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {PROBE_KEYSPACE} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {cluster.nodes}}}"
        )
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {PROBE_KEYSPACE}.probe (k int PRIMARY KEY)"
        )
        self.session.execute(f"INSERT INTO {PROBE_KEYSPACE}.probe (k) VALUES (0)")

    def _pid(self, index: int) -> int:
        pid = self.cluster.pid(index)
        assert pid is not None, f"node {index} is not running"
        return pid

    def kill(self, index: int) -> None:
        """SIGKILL: the JVM dies at once, with whatever it had not synced."""
        os.kill(self._pid(index), signal.SIGKILL)
        eventually(lambda: not self.cluster.is_node_running(index), 30, 0.2)

    def pause(self, index: int) -> None:
        os.kill(self._pid(index), signal.SIGSTOP)
        self._paused.add(index)

    def resume(self, index: int) -> None:
        os.kill(self._pid(index), signal.SIGCONT)
        self._paused.discard(index)

    @contextmanager
    def frozen(self, index: int) -> Iterator[None]:
        """Node ``index`` stopped in its tracks (a long GC pause) for the ``with`` block."""
        self.pause(index)
        try:
            yield
        finally:
            self.resume(index)

    def stop(self, index: int) -> None:
        """A graceful stop (SIGTERM: drains, flushes)."""
        assert self.cluster.stop_node(index), f"node {index} was not running"

    def restart(self, index: int, timeout: float = 180.0) -> float:
        """Start node ``index`` again and wait until the driver sees every node up; returns
        the seconds that took."""
        started = time.monotonic()
        self.cluster.start_node(index)
        self.wait_all_up(timeout)
        return time.monotonic() - started

    def restart_with_clock(self, index: int, offset_ms: int, timeout: float = 180.0) -> float:
        """Stop node ``index`` gracefully and start it again with its wall clock ``offset_ms``
        ahead of the machine's (behind when negative; 0 starts it on the machine's clock):
        Cassandra's own clock seam (``cassieq_dev.local_cassandra.clock``). Returns the
        seconds the restart took."""
        if offset_ms:
            self.cluster.node_jvm[index] = offset_clock(self.cluster.base_dir, offset_ms)
        else:
            self.cluster.node_jvm.pop(index, None)
        if self.cluster.is_node_running(index):
            self.stop(index)
        return self.restart(index, timeout)

    def node_clock_offset(self, index: int) -> float:
        """Node ``index``'s wall clock minus this process's, seconds (read through CQL; see
        :func:`best_offset` for how far off it may be)."""
        from cassandra.query import SimpleStatement

        host = self._host(index)
        stmt = SimpleStatement("SELECT toUnixTimestamp(now()) AS now FROM system.local")

        def sample() -> tuple[float, float, float]:
            before = time.time()
            row = self.session.execute(stmt, host=host, timeout=10).one()
            return row.now / 1000.0, before, time.time()

        return best_offset(sample)

    def cas_stamp_offset(self, index: int) -> float:
        """How far ahead of this process's clock node ``index`` stamps a compare-and-set it
        coordinates, seconds: the write time of such a write is the coordinator's Paxos ballot,
        so this reads the offset of the clock Paxos uses, which ``now()`` alone does not prove
        (:func:`best_offset`: a Paxos round trip is longer, so is its error)."""
        from cassandra import ConsistencyLevel
        from cassandra.query import SimpleStatement

        host = self._host(index)
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {STAMPS_TABLE} (k int PRIMARY KEY, v int)"
        )

        def sample() -> tuple[float, float, float]:
            key = uuid.uuid4().int % 2**31
            before = time.time()
            self.session.execute(
                f"INSERT INTO {STAMPS_TABLE} (k, v) VALUES ({key}, 1) IF NOT EXISTS", host=host
            )
            after = time.time()
            read = SimpleStatement(
                f"SELECT writetime(v) AS w FROM {STAMPS_TABLE} WHERE k = {key}",
                consistency_level=ConsistencyLevel.QUORUM,  # the commit may not have reached all
            )
            row = self.session.execute(read, host=host).one()
            return row.w / 1e6, before, after

        return best_offset(sample)

    def _host(self, index: int) -> Any:
        address = self.cluster.node(index).address
        return next(h for h in self.watcher.metadata.all_hosts() if h.address == address)

    def hosts_up(self) -> dict[str, bool]:
        return {h.address: bool(h.is_up) for h in self.watcher.metadata.all_hosts()}

    def wait_all_up(self, timeout: float = 120.0) -> None:
        """Until the driver sees every node up and every node, as coordinator, sees every
        replica alive: what an operator checks before restarting the next node of a rolling
        restart (stopping one sooner loses a quorum: a test run showed it)."""
        from cassandra import ConsistencyLevel
        from cassandra.query import SimpleStatement

        n = self.cluster.nodes
        eventually(
            lambda: len(self.hosts_up()) == n and all(self.hosts_up().values()), timeout, 0.5
        )
        probe = SimpleStatement(
            f"SELECT k FROM {PROBE_KEYSPACE}.probe WHERE k = 0",
            consistency_level=ConsistencyLevel.ALL,
        )

        def every_node_sees_all() -> bool:
            for host in self.watcher.metadata.all_hosts():
                self.session.execute(probe, host=host, timeout=10)
            return True

        eventually(every_node_sees_all, timeout, 1.0)

    def wait_down(self, index: int, timeout: float = 60.0) -> None:
        address = self.cluster.node(index).address
        eventually(lambda: self.hosts_up().get(address) is False, timeout, 0.5)

    def client_options(self, keyspace: str) -> dict[str, str]:
        return {
            "contactPoints": ",".join(self.cluster.contact_points),
            "port": str(self.cluster.port),
            "keyspace": keyspace,
        }

    def close(self) -> None:
        for index in list(self._paused):  # never leave a frozen JVM behind a failed test
            self.resume(index)
        self.watcher.shutdown()


# -- counted client traffic, in processes of their own -------------------------------------------

# Per producer: bounds the backlog the consumers drain after the faults, however long they took.
PRODUCER_MESSAGES = 600
CONSUMER_MAX_SECONDS = 600.0


@contextmanager
def faults_on(cluster: LocalCassandra, up_timeout: float = 120.0) -> Iterator[Faults]:
    """The fault harness on ``cluster`` once every node is up; on the way out the harness is
    closed and only the nodes this process started are stopped."""
    with cluster:
        faults = Faults(cluster)
        try:
            faults.wait_all_up(up_timeout)
            yield faults
        finally:
            faults.close()


def _described(exc: BaseException) -> str:
    """An error and where in the product it came from, for the test's failure message."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "cassieq_spark" in f.filename]
    where = f" at {frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}"[:300] + where


def produce(
    options: dict[str, str], queue: str, tag: str, stop: Any, out: Any, skew: float = 0.0
) -> None:
    """put and put_many (5 messages) in turn until ``stop``; reports what was sent, every
    error that reached the caller and the longest call (seconds). ``skew``: this process's
    clock moved by that many seconds (the fault seam's skew)."""
    from cassieq_spark import QueueClient
    from cassieq_spark.engine.store import faults

    faults.set_skew(skew)
    sent: list[str] = []
    errors: list[str] = []
    longest = 0.0
    with QueueClient.from_options(options) as client:
        i = 0
        while not stop.is_set():
            if len(sent) >= PRODUCER_MESSAGES:  # enough; the faults may still be under way
                time.sleep(0.2)
                continue
            batch = [f"{tag}-{i}-{k}" for k in range(5 if i % 2 else 1)]
            began = time.monotonic()
            try:
                if len(batch) == 1:
                    client.put(queue, batch[0].encode())
                else:
                    client.put_many(queue, [b.encode() for b in batch])
                sent.extend(batch)
            except Exception as exc:  # the test fails on any; it records which
                errors.append(_described(exc))
            longest = max(longest, time.monotonic() - began)
            i += 1
            time.sleep(0.15)  # about what two consumers keep up with on this machine
    out.put(("producer", sent, errors, longest))


def consume(options: dict[str, str], queue: str, stop: Any, out: Any, skew: float = 0.0) -> None:
    """get/ack until ``stop`` and 8 s without a message; reports (payload, id, got at, acked
    at) per delivery it acked, every error that reached the caller, the longest call and the
    payloads whose ack raised (it may have applied). ``skew`` as for :func:`produce`."""
    from cassieq_spark import QueueClient
    from cassieq_spark.engine.store import faults

    faults.set_skew(skew)
    acked: list[tuple[str, int, float, float]] = []
    errors: list[str] = []
    unsure: list[str] = []
    longest = 0.0
    with QueueClient.from_options(options) as client:
        idle_since = None
        started = time.monotonic()
        while time.monotonic() - started < CONSUMER_MAX_SECONDS:
            began = time.monotonic()
            try:
                msg = client.get(queue, visibility_timeout=60)
                if msg is None:
                    idle_since = idle_since or time.monotonic()
                    if stop.is_set() and time.monotonic() - idle_since > 8:
                        break
                    time.sleep(0.1)
                    continue
                idle_since = None
                got = time.time()
                try:
                    done = client.ack(queue, msg.pop_receipt)
                except Exception:
                    unsure.append(msg.text)  # the ack may have applied: never redelivered
                    raise
                if done:
                    acked.append((msg.text, msg.id, got, time.time()))
            except Exception as exc:
                errors.append(_described(exc))
            longest = max(longest, time.monotonic() - began)
    out.put(("consumer", acked, errors, longest, unsure))


# What a client may see while no node it may use answers: the outage itself, or a request the
# outage cut off.
OUTAGE_ERRORS = ("CassandraUnavailableError", "OperationTimedOut", "WriteTimeout", "ReadTimeout")


def check_outage_traffic(results: list[tuple]) -> dict[str, Any]:
    """Every put that returned was acked once under one id; errors only of the outage's kinds."""
    sent = [p for kind, s, *_ in results if kind == "producer" for p in s]
    acked = [a for kind, a, *_ in results if kind == "consumer" for a in a]
    errors = [e for _, _, errs, *_ in results for e in errs]
    kinds = collections.Counter(e.split(":")[0] for e in errors)
    other = [e for e in errors if not e.startswith(OUTAGE_ERRORS)]
    assert other == [], f"errors other than the outage's reached the clients: {other[:3]}"
    acks = collections.Counter(payload for payload, *_ in acked)
    assert [p for p, n in acks.items() if n > 1] == [], "a message was acked twice"
    ids = collections.defaultdict(set)
    for payload, mid, *_ in acked:
        ids[payload].add(mid)
    assert [p for p, i in ids.items() if len(i) > 1] == [], "a payload was enqueued twice"
    # A delivery whose ack raised (the cluster went away under it) may have been acked: it is
    # then never redelivered, and counts as delivered.
    unsure = {p for kind, *rest in results if kind == "consumer" for p in rest[3]}
    missing = set(sent) - set(acks) - unsure
    assert missing == set(), f"{len(missing)} of {len(sent)} acknowledged puts never delivered"
    return {
        "messages": len(sent),
        "acked": len(acks),
        "ack_outcome_unknown": len(unsure & (set(sent) - set(acks))),
        "errors": dict(kinds),
    }


def check_client_traffic(results: list[tuple[str, list, list[str], float]]) -> dict[str, Any]:
    """Every payload a producer sent was acked exactly once under one id, no delivery was held
    by two consumers at once, and no error reached a caller. Returns figures for the report."""
    import collections

    sent = [s for kind, s, *_ in results if kind == "producer" for s in s]
    acked = [a for kind, a, *_ in results if kind == "consumer" for a in a]
    errors = [e for _, _, errs, *_ in results for e in errs]
    longest_call = max((r[3] for r in results), default=0.0)
    kinds = collections.Counter(e.split(":")[0] for e in errors)
    assert errors == [], f"{len(errors)} errors reached the callers {dict(kinds)}: {errors[:3]}"
    assert len(sent) == len(set(sent)) and len(sent) > 100, len(sent)
    ids_per_payload = collections.defaultdict(set)
    for payload, mid, _, _ in acked:
        ids_per_payload[payload].add(mid)
    duplicated = {p: ids for p, ids in ids_per_payload.items() if len(ids) > 1}
    assert duplicated == {}, f"{len(duplicated)} payloads enqueued twice"
    acks = collections.Counter(payload for payload, _, _, _ in acked)
    assert [p for p, n in acks.items() if n > 1] == [], "a message was acked twice"
    missing = set(sent) - set(acks)
    assert missing == set(), f"{len(missing)} of {len(sent)} never delivered"
    # One delivery per message (acks are immediate, visibility 60 s): two holders at once
    # would have shown as a second ack above; overlapping holds of one id are checked too.
    holds = collections.defaultdict(list)
    for _, mid, got, done in acked:
        holds[mid].append((got, done))
    overlapping = [m for m, h in holds.items() if len(h) > 1]
    assert overlapping == [], f"ids held by two consumers: {overlapping[:5]}"
    times = sorted(done for _, _, _, done in acked)
    gap = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
    return {
        "messages": len(sent),
        "longest_ack_pause_s": round(gap, 1),
        "longest_client_call_s": round(longest_call, 1),
    }
