"""One Cassandra node's wall clock ahead of, then behind, the others', under load, counted.

A durable 3-node cluster of its own (RF 3, CQL 22042, storage 22000 on 127.0.0.1-3). Node 3 is
restarted with its wall clock ``OFFSET_MS`` ahead of the machine's (Cassandra's own clock seam:
``cassieq_dev.local_cassandra.clock``; its ``now()`` is read back through CQL to prove it), then,
in the second run, behind. Each run carries the partition test's load, with the clients' clocks
right: a streaming sink (20 rows/s) and the streaming source on one queue whose lease row node
3 coordinates (its compare-and-sets carry node 3's ballots), a client producer into it, two
client producers and two client get/ack consumers on a second queue (each client in its own
process; which node coordinates a partition's requests follows its token), for
``LOAD_SECONDS``.

Counted per run: every row of a committed sink batch and every message a producer sent
delivered (0 lost), once (a second delivery only inside a replay of the same Spark batch), no
error at a client, both queries running, the longest stretch without a stream batch.
``CASSIEQ_NODE_CLOCK_OFFSET_MS`` runs it at another offset (a bound search).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.cluster_faults import (
    STAMPS_TABLE,
    Faults,
    check_client_traffic,
    consume,
    durable_cluster,
    eventually,
    faults_on,
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

from cassieq_spark import QueueClient
from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import read_range

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

# Ports and directory of this test's own cluster: the shared one (19042/17000), the
# development node (9042/7000) and the other harnesses' clusters are never touched.
PORT = 22042  # below Linux's ephemeral range (32768-60999)
STORAGE_PORT = 22000
SKEWED_NODE = 3
OFFSET_MS = int(os.environ.get("CASSIEQ_NODE_CLOCK_OFFSET_MS", "2000"))
LOAD_SECONDS = 60.0
# The longest stretch without a stream batch, or between two client acks: no node is down
# during the load, so a pause this long is the skew's doing.
PAUSE_BOUND_S = 15.0


@pytest.fixture(scope="module")
def skewable() -> Iterator[Faults]:
    cluster = durable_cluster(3, PORT, STORAGE_PORT, "node-clock")
    with faults_on(cluster) as faults:  # stops only the nodes this module started
        yield faults


def wait_behind_a_failed_cas(faults: Faults, ahead: int, behind: int) -> float:
    """Seconds a compare-and-set coordinated by node ``behind`` takes right after one whose
    condition failed on the same partition, coordinated by node ``ahead``: its ballot must be
    above the other's, and its own clock gives it one only once it passed the other's time,
    unless Paxos raises it (the coordinator does so above the last accepted ballot it hears
    of). Printed as a figure of the run."""
    from cassandra.query import SimpleStatement

    hosts = {h.address: h for h in faults.watcher.metadata.all_hosts()}
    key = uuid.uuid4().int % 2**31
    faults.session.execute(f"INSERT INTO {STAMPS_TABLE} (k, v) VALUES ({key}, 1)")
    update = f"UPDATE {STAMPS_TABLE} SET v = %s WHERE k = {key} IF v = %s"
    failed = faults.session.execute(
        SimpleStatement(update % (2, 99)), host=hosts[faults.cluster.node(ahead).address]
    ).one()
    assert not failed.applied
    began = time.monotonic()
    done = faults.session.execute(
        SimpleStatement(update % (3, 1)), host=hosts[faults.cluster.node(behind).address]
    ).one()
    assert done.applied
    return time.monotonic() - began


def odd_rows(admin: QueueClient, queue: str, plain: bool, limit: int = 40) -> list[str]:
    """The rows of ``queue`` not acked after a single delivery (``plain``: also those never
    claimed, which the stream acks by moving its pointer), with their write times relative to
    the payload's (seconds): a cell stamped by node 3's clock stands out by about the offset."""
    info = admin.get_queue(queue)
    next_id = monoton.horizon(admin.conn, info, 0).next_id
    columns = (
        "id, version, deliveries, acked, dead, writetime(enqueued_at) AS put_at, "
        "writetime(invisible_until) AS claimed_at, writetime(acked) AS acked_at"
    )
    out = []
    for r in read_range(admin.conn, info, 0, next_id, columns):
        if not r.dead and (
            (r.acked and (r.version or 0) <= 1) or (not plain and r.version is None)
        ):
            continue
        rel = [
            None if t is None else round((t - r.put_at) / 1e6, 3)
            for t in (r.claimed_at, r.acked_at)
        ]
        out.append(
            f"id {r.id}: version {r.version} deliveries {r.deliveries} acked {r.acked} dead "
            f"{r.dead}; claim, ack written {rel[0]}, {rel[1]} s after the put"
        )
    return out[:limit]


@pytest.mark.parametrize("sign", [1, -1], ids=["ahead", "behind"])
def test_spark_and_clients_count_right_with_one_node_clock_off(
    skewable: Faults, sspark: Any, tmp_path: Any, sign: int
) -> None:
    offset_ms = sign * OFFSET_MS
    skewable.restart_with_clock(SKEWED_NODE, offset_ms)
    measured = skewable.node_clock_offset(SKEWED_NODE)
    others = [skewable.node_clock_offset(i) for i in (1, 2)]
    cas = skewable.cas_stamp_offset(SKEWED_NODE)
    print(
        f"\nnode {SKEWED_NODE} asked {offset_ms:+d} ms: now() {measured:+.3f} s, a "
        f"compare-and-set's write time {cas:+.3f} s; nodes 1, 2: "
        + ", ".join(f"{o:+.3f} s" for o in others)
    )
    ahead, behind = (SKEWED_NODE, 1) if offset_ms > 0 else (1, SKEWED_NODE)
    waits = [wait_behind_a_failed_cas(skewable, ahead, behind) for _ in range(3)]
    print(
        f"a compare-and-set through node {behind} right after a failed one through node "
        f"{ahead}: " + ", ".join(f"{w:.2f} s" for w in waits)
    )
    assert abs(measured - offset_ms / 1000) < 0.25, measured
    assert abs(cas - offset_ms / 1000) < 0.5, cas
    assert all(abs(o) < 0.25 for o in others), others

    options = skewable.client_options("cassieq_node_clock")
    admin = QueueClient.from_options(options)
    dc = next(iter(admin.conn.cluster.metadata.all_hosts())).datacenter
    admin.bootstrap(create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 3})
    stream_q = queue_led_by(admin, skewable.cluster.node(SKEWED_NODE).address, "s")
    client_q = f"c_{uuid.uuid4().hex[:8]}"
    admin.create_queue(client_q)

    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=produce, args=(options, stream_q, "sp", stop, out))]
    procs += [
        ctx.Process(target=produce, args=(options, client_q, f"p{i}", stop, out)) for i in (0, 1)
    ]
    procs += [ctx.Process(target=consume, args=(options, client_q, stop, out)) for _ in (0, 1)]

    collector = TimedCollector()
    src_opts = {**options, "queue": stream_q, "consumerId": f"{stream_q}-src"}
    src = start_source(sspark, src_opts, collector, str(tmp_path / "src"))
    sink = start_sink(sspark, {**options, "queue": stream_q}, str(tmp_path / "sink"))
    try:
        running(lambda: collector.arrivals, 180, src, sink)
        for p in procs:
            p.start()
        t0 = time.time()
        time.sleep(LOAD_SECONDS)
        pause = collector.longest_pause(t0, time.time())
        for query, qname in ((src, "source"), (sink, "sink")):
            assert query.isActive and query.exception() is None, f"the {qname} query stopped"
    except BaseException:
        abandon(procs, stop, src, sink)  # else the children block on `out` and pytest never exits
        raise
    finally:
        stop.set()
    results = [out.get(timeout=700) for _ in procs]
    for p in procs:
        p.join(30)
    sink.stop()
    sink.awaitTermination(60)
    to_stream = [r for r in results if r[0] == "producer" and r[1] and r[1][0].startswith("sp-")]
    assert len(to_stream) == 1 and to_stream[0][2] == [], to_stream[0][2][:3]
    results = [r for r in results if r is not to_stream[0]]
    must_have = {f"rate-{k}" for k in range(committed_rate_rows(sink))} | set(to_stream[0][1])
    rows = live_rows(admin, stream_q)
    try:
        eventually(lambda: set(rows) <= set(collector.deliveries()), 240, 1.0)
        time.sleep(3)  # a late duplicate would show up here
    finally:
        src.stop()
    assert src.exception() is None
    try:
        figures = check_client_traffic(results)
        stream = assert_stream_accounted(collector, rows, must_have)
    except AssertionError:
        for queue in (client_q, stream_q):  # evidence: whose clock stamped what
            print(
                f"\nrows of {queue} not plainly acked once:\n" + "\n".join(odd_rows(admin, queue))
            )
        raise
    print(
        f"\nnode {SKEWED_NODE} {offset_ms:+d} ms: stream {stream['delivered']} messages "
        f"delivered, {stream['replayed_in_same_batch']} again in a replay of the same batch; "
        f"clients: {figures}; longest stream pause {pause:.1f} s"
    )
    assert admin.stats(stream_q)["backlog"] == 0
    assert pause < PAUSE_BOUND_S, f"the stream stopped for {pause:.1f} s"
    assert figures["longest_ack_pause_s"] < PAUSE_BOUND_S, figures
    admin.close()
