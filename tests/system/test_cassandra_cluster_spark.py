"""Spark queries through Cassandra failures, counted.

- On the durable 3-node cluster (RF=3): a streaming sink, a streaming source (processingTime
  trigger) on a queue whose lease row node 3 coordinates, a client producer into the stream's
  queue and two client producers and two client get/ack consumers on a second queue, all at
  once, each client's clock 2 s ahead of or behind the nodes' (the fault seam's skew), while
  node 3 is SIGKILLed and comes back 20 s later with its wall clock 2 s ahead of the others'
  (Cassandra's clock seam: a node rebooted before its clock was synced), node 2 is frozen for
  10 s (node 3 is then in every quorum), and every node is restarted in turn (a rolling restart
  of nodes 2, 1, 3; node 3 comes back on the machine's clock). Nothing may be lost, no message
  held by two consumers, no error may reach a client, the Spark queries must keep running and
  the stream and the clients go on within ``RESUME_BOUND_S`` of every fault.
- On one durable node: the node SIGKILLed under a running source and sink. Both queries fail
  with one clear error naming Cassandra, without hanging; restarted from their checkpoints
  once the node is back, they deliver everything.

Every id is accounted for: delivered once, or again only inside a replay of the same Spark
batch (same batch id), which the test names.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.cluster_faults import (
    CLUSTER_NODES,
    Faults,
    check_client_traffic,
    consume,
    durable_cluster,
    eventually,
    produce,
)
from support.cluster_stream import (
    TimedCollector,
    abandon,
    assert_stream_accounted,
    committed_rate_rows,
    live_rows,
    queue_led_by,
    running,
    start_sink,
    start_source,
)

from cassieq_dev.local_cassandra import offset_clock
from cassieq_spark import QueueClient
from cassieq_spark.spark import register

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


@pytest.fixture(scope="module")
def sspark(spark: Any) -> Any:
    register(spark)
    # Every progress report is kept (default: the last 100), so the sink's committed rows can be
    # summed over a run of several minutes.
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    return spark


# -- 3 nodes, RF=3: kill, pause, rolling restart, skewed clocks ------------------------------------

# The clients' clocks, ahead of and behind the nodes' (seconds), and node 3's after its kill
# (ms): within half the queues' repair timeout, the protocol's clock condition
# (docs/internals/protocol.md#conditions).
CLIENT_SKEW_S = 2.0
SKEWED_NODE = 3
NODE_OFFSET_MS = 2000
# How far a clock read back may stray from the offset asked: a read's round trip on a loaded
# machine (a compare-and-set's is longer: Paxos).
NOW_TOLERANCE_S = 0.25
CAS_TOLERANCE_S = 0.5
# The longest stretch without a stream batch or between two client acks, through any of the
# faults: a quorum stays up throughout. A killed replica's connections die at once; a frozen
# one is silent, and the driver leaves it within 16 s (its heartbeat, engine/store/session.py)
# while its compare-and-sets wait out the 10 s freeze. The partition test's bound, for the
# same reasons.
RESUME_BOUND_S = 25.0


def _read_clocks(faults: Faults, offset_ms: int) -> str:
    """Node SKEWED_NODE's clock read back through itself (``now()`` and the write time of a
    compare-and-set it coordinates, its Paxos ballot) and the others' ``now()``: each within
    its tolerance of what was asked, so the load provably ran against a node that far off."""
    now = faults.node_clock_offset(SKEWED_NODE)
    cas = faults.cas_stamp_offset(SKEWED_NODE)
    others = {
        i: faults.node_clock_offset(i) for i in range(1, CLUSTER_NODES + 1) if i != SKEWED_NODE
    }
    assert abs(now - offset_ms / 1000) < NOW_TOLERANCE_S, (offset_ms, now)
    assert abs(cas - offset_ms / 1000) < CAS_TOLERANCE_S, (offset_ms, cas)
    assert all(abs(o) < NOW_TOLERANCE_S for o in others.values()), others
    return f"now() {now:+.2f} s, a compare-and-set's write time {cas:+.2f} s; " + ", ".join(
        f"node {i} {o:+.2f} s" for i, o in others.items()
    )


# The races this test found (a CAS settle read giving up under a frozen node; the lease taking
# its own renewal for a takeover; a reservation-key claim and a counter read giving up) are
# forced deterministically in test_node_fault_races.py.
def test_spark_and_clients_ride_through_kill_pause_and_rolling_restart(
    cluster3: Faults, sspark: Any, tmp_path: Any
) -> None:
    options = cluster3.client_options("cassieq_cluster_spark")
    admin = QueueClient.from_options(options)
    dc = next(iter(admin.conn.cluster.metadata.all_hosts())).datacenter
    admin.bootstrap(create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 3})
    # The lease's and the pointers' compare-and-sets go first to node 3: while its clock is
    # ahead they carry its ballots.
    began = time.time()
    stream_q = queue_led_by(admin, cluster3.cluster.node(SKEWED_NODE).address, "s")
    took = {"a queue led by node 3": time.time() - began}
    client_q = f"c_{uuid.uuid4().hex[:8]}"
    admin.create_queue(client_q)

    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    skew = CLIENT_SKEW_S
    procs = [ctx.Process(target=produce, args=(options, stream_q, "sp", stop, out, skew))]
    procs += [
        ctx.Process(target=produce, args=(options, client_q, f"p{i}", stop, out, sign * skew))
        for i, sign in enumerate((1, -1))
    ]
    procs += [
        ctx.Process(target=consume, args=(options, client_q, stop, out, sign * skew))
        for sign in (1, -1)
    ]

    collector = TimedCollector()
    src_opts = {**options, "queue": stream_q, "consumerId": f"{stream_q}-src"}
    src = start_source(sspark, src_opts, collector, str(tmp_path / "src"))
    sink = start_sink(sspark, {**options, "queue": stream_q}, str(tmp_path / "sink"))
    pauses: dict[str, float] = {}
    clocks: dict[str, str] = {}
    try:
        running(lambda: collector.arrivals, 180, src, sink)
        for p in procs:
            p.start()
        time.sleep(10)  # traffic first

        t0 = time.time()
        cluster3.kill(SKEWED_NODE)
        offset_clock(cluster3.cluster.base_dir, NODE_OFFSET_MS)  # compiled while it is down
        time.sleep(max(0.0, 20 - (time.time() - t0)))
        took["node 3 up ahead"] = cluster3.restart_with_clock(SKEWED_NODE, NODE_OFFSET_MS)
        ahead_since = time.time()
        clocks["after the kill"] = _read_clocks(cluster3, NODE_OFFSET_MS)
        took["clocks read back"] = time.time() - ahead_since
        time.sleep(max(0.0, 5 - (time.time() - ahead_since)))
        pauses[f"node 3 SIGKILLed, back 20 s later {NODE_OFFSET_MS} ms ahead"] = (
            collector.longest_pause(t0, time.time())
        )
        print(f"\nkill + restart phase: {time.time() - t0:.0f} s")

        t0 = time.time()
        with cluster3.frozen(2):
            time.sleep(10)
        time.sleep(5)
        pauses["node 2 frozen 10 s"] = collector.longest_pause(t0, time.time())
        print(f"pause phase: {time.time() - t0:.0f} s")

        t0 = time.time()
        for index in (2, 1):
            cluster3.stop(index)
            took[f"node {index} restarted"] = cluster3.restart(index)
        skewed_until = time.time()
        # Its clock synced again; restart_with_clock stops it first.
        took["node 3 restarted on the machine's clock"] = cluster3.restart_with_clock(
            SKEWED_NODE, 0
        )
        restored = time.time()
        clocks["after the rolling restart"] = _read_clocks(cluster3, 0)
        time.sleep(max(0.0, 5 - (time.time() - restored)))
        pauses["rolling restart of nodes 2, 1, 3"] = collector.longest_pause(t0, time.time())
        print(f"rolling restart phase: {time.time() - t0:.0f} s")
        print(
            f"node 3 ran {NODE_OFFSET_MS} ms ahead under load for "
            f"{skewed_until - ahead_since:.0f} s; "
            "seconds taken: " + ", ".join(f"{k} {v:.0f}" for k, v in took.items())
        )

        for query, name in ((src, "source"), (sink, "sink")):
            assert query.isActive and query.exception() is None, f"the {name} query stopped"
    except BaseException:
        abandon(procs, stop, src, sink)  # else the children block on `out` and pytest never exits
        if SKEWED_NODE in cluster3.cluster.node_jvm:  # the tests after it share the cluster
            cluster3.restart_with_clock(SKEWED_NODE, 0)
        raise
    finally:
        stop.set()
    t0 = time.time()
    results = [out.get(timeout=700) for _ in procs]
    for p in procs:
        p.join(30)
    print(f"client drain: {time.time() - t0:.0f} s")
    sink.stop()
    sink.awaitTermination(60)
    # The stream queue's producer tags its payloads "sp-"; its errors count like the others'.
    to_stream = [r for r in results if r[0] == "producer" and r[1] and r[1][0].startswith("sp-")]
    assert len(to_stream) == 1 and to_stream[0][2] == [], to_stream[0][2][:3]
    results = [r for r in results if r is not to_stream[0]]
    sent_to_stream = set(to_stream[0][1])
    must_have = {f"rate-{k}" for k in range(committed_rate_rows(sink))} | sent_to_stream
    rows = live_rows(admin, stream_q)
    try:
        eventually(lambda: set(rows) <= set(collector.deliveries()), 240, 1.0)
        print(f"stream drain: {time.time() - t0:.0f} s")
        time.sleep(3)  # a late duplicate would show up here
    finally:
        src.stop()
    assert src.exception() is None
    figures = check_client_traffic(results)  # the two client queues' producers and consumers
    stream = assert_stream_accounted(collector, rows, must_have)
    assert stream["replayed_in_same_batch"] == 0, "the source never failed, so nothing replays"
    stats = admin.stats(stream_q)
    assert stats["backlog"] == 0, stats
    print(
        "\nnode 3's clock: "
        + "; ".join(f"{k}: {v}" for k, v in clocks.items())
        + f"\nstream: {stream['delivered']} messages delivered once; clients: {figures}, "
        f"{len(sent_to_stream)} puts into the stream's queue (longest {to_stream[0][3]:.1f} s); "
        "longest stream pause per fault (s): "
        + ", ".join(f"{k}: {v:.1f}" for k, v in pauses.items())
    )
    for name, pause in pauses.items():
        assert pause < RESUME_BOUND_S, f"{name}: the stream stopped for {pause:.1f} s"
    # A single call is printed, not bounded: a compare-and-set a frozen or stopping replica
    # holds is not sent elsewhere blind, it may wait out the 20 s request timeout and then be
    # settled by reading.
    assert figures["longest_ack_pause_s"] < RESUME_BOUND_S, figures
    admin.close()


# -- 1 node: killed under running queries, restarted from checkpoints ------------------------------

SINGLE_PORT = 29042
SINGLE_STORAGE_PORT = 27000
FAIL_WITHIN_S = 60.0  # the driver's connect and request timeouts are 10 s and 20 s


@pytest.fixture(scope="module")
def single_node() -> Iterator[Faults]:
    node = durable_cluster(1, SINGLE_PORT, SINGLE_STORAGE_PORT, "single-fault", heap="512M")
    with node:
        faults = Faults(node)
        try:
            yield faults
        finally:
            faults.close()


def _wait_failed(query: Any, timeout: float) -> str:
    deadline = time.time() + timeout
    while query.isActive and time.time() < deadline:
        time.sleep(0.2)
    assert not query.isActive, f"the query still runs {timeout:.0f} s after Cassandra died"
    exc = query.exception()
    assert exc is not None, "the query stopped without an error"
    # A failed write reads "Writing job failed." with the task's error as its cause: what a user
    # sees is the whole chain (Spark logs it, and the cause is on the exception).
    parts, seen = [str(exc)], exc
    while getattr(seen, "_cause", None) is not None:
        seen = seen._cause
        parts.append(str(seen))
    return "\n--- caused by ---\n".join(parts)


def test_single_node_killed_under_running_queries_fails_clearly_and_resumes(
    single_node: Faults, sspark: Any, tmp_path: Any
) -> None:
    options = single_node.client_options("cassieq_single_fault")
    admin = QueueClient.from_options(options)
    admin.bootstrap(create_keyspace=True)
    queue = f"s_{uuid.uuid4().hex[:8]}"
    admin.create_queue(queue, bucket_size=100, repair_timeout=120)
    admin.close()

    collector = TimedCollector()
    src_opts = {**options, "queue": queue, "consumerId": f"{queue}-src"}
    src_ck, sink_ck = str(tmp_path / "src"), str(tmp_path / "sink")
    src = start_source(sspark, src_opts, collector, src_ck)
    sink = start_sink(sspark, {**options, "queue": queue}, sink_ck)
    committed = 0
    try:
        running(lambda: len(collector.arrivals) >= 3, 180, src, sink)
        killed = time.time()
        single_node.kill(1)
        errors = {
            name: _wait_failed(q, FAIL_WITHIN_S) for name, q in (("source", src), ("sink", sink))
        }
        failed_after = time.time() - killed
        committed = committed_rate_rows(sink)
    finally:
        for q in (src, sink):
            if q.isActive:
                q.stop()
    for name, text in errors.items():
        # One error a user can act on, naming the Cassandra that is gone (Spark wraps it in
        # its own StreamingQueryException and the Python worker's traceback).
        assert "CassandraUnavailableError" in text or "ConnectionFailedError" in text, (
            f"the {name} failed with something else: {text[-1500:]}"
        )
        assert f"127.0.0.1:{SINGLE_PORT}" in text, (
            f"the {name}'s error names no Cassandra: {text[-1500:]}"
        )

    single_node.restart(1)
    # Restarted from their checkpoints: the sink replays its failed batch (keyed: written once),
    # the source replays its uncommitted batch (the same batch id) and goes on.
    src = start_source(sspark, src_opts, collector, src_ck)
    sink = start_sink(sspark, {**options, "queue": queue}, sink_ck)
    admin = QueueClient.from_options(options)
    try:
        running(lambda: committed_rate_rows(sink) > 40, 180, sink, src)
        sink.stop()
        sink.awaitTermination(60)
        assert sink.exception() is None, sink.exception()
        # The first run committed rate-0 .. rate-(committed-1); the second replays the failed
        # batch and goes on from there.
        must_have = {f"rate-{k}" for k in range(committed + committed_rate_rows(sink))}
        rows = live_rows(admin, queue)
        eventually(lambda: set(rows) <= set(collector.deliveries()), 180, 1.0)
        time.sleep(3)
        assert src.exception() is None, src.exception()
    finally:
        for q in (src, sink):
            if q.isActive:
                q.stop()
    stream = assert_stream_accounted(collector, rows, must_have)
    assert admin.stats(queue)["backlog"] == 0
    admin.close()
    print(
        f"\nboth queries failed {failed_after:.1f} s after the SIGKILL; after the restart "
        f"{stream['delivered']} messages delivered, {stream['replayed_in_same_batch']} again in "
        "a replay of the same batch"
    )
