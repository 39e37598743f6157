"""One Cassandra node's wall clock ahead of, then behind, the others', under load, counted.

A durable 3-node cluster of its own (RF 3, CQL 39042, storage 37000 on 127.0.0.1-3). Node 3 is
restarted with its wall clock ``OFFSET_MS`` ahead of the machine's (Cassandra's own clock seam:
``cassieq_dev.local_cassandra.clock``; its ``now()`` is read back through CQL to prove it), then,
in the second run, behind. Each run carries the partition test's load, with the clients' clocks
right: a streaming sink (20 rows/s) and the streaming source on one queue whose lease row node
3 coordinates (its compare-and-sets carry node 3's ballots), a client producer into it, two
client producers and two client get/ack consumers on a second queue (each client in its own
process; every node coordinates a share of their requests), for ``LOAD_SECONDS``.

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

from cassieq_spark import QueueClient

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

# Ports and directory of this test's own cluster: the shared one (19042/17000), the
# development node (9042/7000) and the other harnesses' clusters are never touched.
PORT = 39042
STORAGE_PORT = 37000
SKEWED_NODE = 3
OFFSET_MS = int(os.environ.get("CASSIEQ_NODE_CLOCK_OFFSET_MS", "2000"))
LOAD_SECONDS = 60.0
# The longest stretch without a stream batch, or between two client acks: no node is down
# during the load, so a pause this long is the skew's doing.
PAUSE_BOUND_S = 15.0


@pytest.fixture(scope="module")
def skewable() -> Iterator[Faults]:
    cluster = durable_cluster(3, PORT, STORAGE_PORT, "node-clock")
    with cluster:  # stops only the nodes this module started
        faults = Faults(cluster)
        try:
            faults.wait_all_up()
            yield faults
        finally:
            faults.close()


@pytest.mark.parametrize("sign", [1, -1], ids=["ahead", "behind"])
def test_spark_and_clients_count_right_with_one_node_clock_off(
    skewable: Faults, sspark: Any, tmp_path: Any, sign: int
) -> None:
    offset_ms = sign * OFFSET_MS
    skewable.restart_with_clock(SKEWED_NODE, offset_ms)
    measured = skewable.node_clock_offset(SKEWED_NODE)
    others = [skewable.node_clock_offset(i) for i in (1, 2)]
    print(f"\nnode {SKEWED_NODE} clock {measured:+.3f} s, others {others} (asked {offset_ms} ms)")
    assert abs(measured - offset_ms / 1000) < 0.25, measured
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
    figures = check_client_traffic(results)
    stream = assert_stream_accounted(collector, rows, must_have)
    print(
        f"\nnode {SKEWED_NODE} {offset_ms:+d} ms: stream {stream['delivered']} messages "
        f"delivered, {stream['replayed_in_same_batch']} again in a replay of the same batch; "
        f"clients: {figures}; longest stream pause {pause:.1f} s"
    )
    assert admin.stats(stream_q)["backlog"] == 0
    assert pause < PAUSE_BOUND_S, f"the stream stopped for {pause:.1f} s"
    assert figures["longest_ack_pause_s"] < PAUSE_BOUND_S, figures
    admin.close()
