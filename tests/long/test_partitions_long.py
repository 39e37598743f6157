"""A node cut off from the network while it keeps running, counted.

On the shared durable 3-node cluster (RF 3, ``cluster3``), all at once: a streaming sink and
the streaming source on one queue, a client producer into it, two client producers and two
client get/ack consumers on a second queue (each client in its own process, its clock 2 s
ahead of or behind the nodes' through the fault seam's skew). Through that load:

1. node 3 cut off from everyone for 30 s (packets to and from it dropped on the cluster's CQL
   and storage ports), then healed;
2. the coordinator of the stream's lease row (the first replica the driver sends the lease's
   compare-and-sets to) cut off one way for 30 s: it can send, not receive; then healed.

A quorum stays reachable throughout, so: every row of a committed sink batch and every message
a producer sent is delivered (0 lost), once (a second delivery only inside a replay of the same
Spark batch), no error reaches a client, both queries keep running, and the stream and the
clients make progress again within ``RESUME_BOUND_S`` of a cut.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.cluster_faults import (
    CLUSTER_PORT,
    Faults,
    check_client_traffic,
    consume,
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
from support.net_faults import BOTH, INBOUND, NetworkFaults, wait_reachable

from cassieq_spark import QueueClient

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

CUT_SECONDS = 30.0
SKEW_S = 2.0
# The longest stretch without a stream batch, or between two client acks, while a node is cut
# off: the driver notices a silent node within HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT
# (engine/store/session.py) and fails its requests in flight over to the other replicas.
RESUME_BOUND_S = 25.0


@pytest.fixture(scope="module")
def net(cluster3: Faults) -> Iterator[NetworkFaults]:
    faults = NetworkFaults(cluster3.cluster)
    try:
        yield faults
    finally:
        faults.close()


def test_spark_and_clients_ride_through_a_cut_off_node_and_a_one_way_cut_of_the_lease_coordinator(
    cluster3: Faults, net: NetworkFaults, sspark: Any, tmp_path: Any
) -> None:
    options = cluster3.client_options("cassieq_partitions")
    admin = QueueClient.from_options(options)
    dc = next(iter(admin.conn.cluster.metadata.all_hosts())).datacenter
    admin.bootstrap(create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 3})
    lease_node = cluster3.cluster.node(2).address
    stream_q = queue_led_by(admin, lease_node, "s")
    client_q = f"c_{uuid.uuid4().hex[:8]}"
    admin.create_queue(client_q)

    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    # Client clocks 2 s ahead of and behind the nodes' (the fault seam's skew), all along.
    procs = [ctx.Process(target=produce, args=(options, stream_q, "sp", stop, out, SKEW_S))]
    procs += [
        ctx.Process(target=produce, args=(options, client_q, f"p{i}", stop, out, sign * SKEW_S))
        for i, sign in enumerate((1, -1))
    ]
    procs += [
        ctx.Process(target=consume, args=(options, client_q, stop, out, sign * SKEW_S))
        for sign in (1, -1)
    ]

    collector = TimedCollector()
    src_opts = {**options, "queue": stream_q, "consumerId": f"{stream_q}-src"}
    src = start_source(sspark, src_opts, collector, str(tmp_path / "src"))
    sink = start_sink(sspark, {**options, "queue": stream_q}, str(tmp_path / "sink"))
    pauses: dict[str, float] = {}
    cuts: list[tuple[float, float]] = []
    try:
        running(lambda: collector.arrivals, 180, src, sink)
        for p in procs:
            p.start()
        time.sleep(10)  # traffic first

        for name, index, direction in (
            ("node 3 cut off from everyone", 3, BOTH),
            ("lease coordinator (node 2) cannot receive", 2, INBOUND),
        ):
            address = cluster3.cluster.node(index).address
            t0 = time.time()
            with net.partitioned(index, direction):
                time.sleep(CUT_SECONDS)
            healed = time.time()
            cuts.append((t0, healed))
            wait_reachable(address, CLUSTER_PORT)
            cluster3.wait_all_up(180)
            time.sleep(5)
            pauses[name] = collector.longest_pause(t0, time.time())
            print(f"\n{name}: back {time.time() - healed:.0f} s after the heal")

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
        f"\nstream: {stream['delivered']} messages delivered, {stream['replayed_in_same_batch']} "
        f"again in a replay of the same batch; clients: {figures}; longest stream pause per cut "
        "(s): " + ", ".join(f"{k}: {v:.1f}" for k, v in pauses.items())
    )
    assert admin.stats(stream_q)["backlog"] == 0
    for name, pause in pauses.items():
        assert pause < RESUME_BOUND_S, f"{name}: the stream stopped for {pause:.1f} s"
    assert figures["longest_ack_pause_s"] < RESUME_BOUND_S, figures
    assert figures["longest_client_call_s"] < RESUME_BOUND_S, figures
    assert to_stream[0][3] < RESUME_BOUND_S, f"a put into the stream took {to_stream[0][3]:.1f} s"
    admin.close()
