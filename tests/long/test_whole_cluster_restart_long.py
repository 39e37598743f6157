"""Every node of the cluster stopped under running queries and clients, then started again;
counted.

On the shared durable 3-node cluster (RF 3, ``cluster3``): a streaming sink and the streaming
source on one queue, a client producer into it, two client producers and two client get/ack
consumers on a second queue. All three nodes are stopped at once (SIGTERM each), then started
again; the load then runs on for ``AFTER_S``.

- Both queries fail within ``FAIL_WITHIN_S`` with ``CassandraUnavailableError`` (or the
  ``ConnectionFailedError`` of a worker connecting meanwhile) naming the cluster, never hang; restarted from their checkpoints once the cluster is back, they deliver
  every row of every committed sink batch, once (again only inside a replay of the same batch).
- The clients see errors only while no node answers, each a ``CassandraUnavailableError`` (or
  a timeout of a request the outage cut off); every put that returned is delivered to a
  consumer and acked once (nothing acknowledged is lost, nothing is held by two consumers).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import uuid
from typing import Any

import pytest
from support.cluster_faults import (
    OUTAGE_ERRORS,
    Faults,
    check_outage_traffic,
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
    running,
    start_sink,
    start_source,
)

from cassieq_spark import QueueClient

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

FAIL_WITHIN_S = 60.0
AFTER_S = 30.0


def wait_failed(query: Any, timeout: float) -> str:
    deadline = time.time() + timeout
    while query.isActive and time.time() < deadline:
        time.sleep(0.2)
    assert not query.isActive, f"the query still runs {timeout:.0f} s after the cluster stopped"
    exc = query.exception()
    assert exc is not None, "the query stopped without an error"
    parts, seen = [str(exc)], exc
    while getattr(seen, "_cause", None) is not None:
        seen = seen._cause
        parts.append(str(seen))
    return "\n--- caused by ---\n".join(parts)


def test_whole_cluster_restart_fails_queries_clearly_and_loses_nothing_acknowledged(
    cluster3: Faults, sspark: Any, tmp_path: Any
) -> None:
    options = cluster3.client_options("cassieq_whole_restart")
    admin = QueueClient.from_options(options)
    dc = next(iter(admin.conn.cluster.metadata.all_hosts())).datacenter
    admin.bootstrap(create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 3})
    stream_q, client_q = (f"{k}_{uuid.uuid4().hex[:8]}" for k in ("s", "c"))
    admin.create_queue(stream_q, bucket_size=200, repair_timeout=120)
    admin.create_queue(client_q)
    admin.close()

    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=produce, args=(options, stream_q, "sp", stop, out))]
    procs += [
        ctx.Process(target=produce, args=(options, client_q, f"p{i}", stop, out)) for i in range(2)
    ]
    procs += [ctx.Process(target=consume, args=(options, client_q, stop, out)) for _ in range(2)]

    collector = TimedCollector()
    src_opts = {**options, "queue": stream_q, "consumerId": f"{stream_q}-src"}
    src_ck, sink_ck = str(tmp_path / "src"), str(tmp_path / "sink")
    src = start_source(sspark, src_opts, collector, src_ck)
    sink = start_sink(sspark, {**options, "queue": stream_q}, sink_ck)
    nodes = range(1, cluster3.cluster.nodes + 1)
    try:
        running(lambda: len(collector.arrivals) >= 3, 180, src, sink)
        for p in procs:
            p.start()
        time.sleep(10)

        stopped = time.time()
        stoppers = [threading.Thread(target=cluster3.stop, args=(i,)) for i in nodes]
        for t in stoppers:
            t.start()
        errors = {
            name: wait_failed(q, FAIL_WITHIN_S) for name, q in (("source", src), ("sink", sink))
        }
        failed_after = time.time() - stopped
        for t in stoppers:
            t.join(120)
        committed = committed_rate_rows(sink)
        for name, text in errors.items():
            # CassandraUnavailableError (a ConnectionFailedError) from a request, or the
            # ConnectionFailedError of a worker that connects while no node answers.
            assert "ConnectionFailedError" in text or "CassandraUnavailableError" in text, (
                f"the {name} failed with: {text[-1500:]}"
            )
            assert f":{cluster3.cluster.port}" in text, f"the {name}'s error names no Cassandra"

        started = time.time()
        for i in nodes:
            cluster3.cluster.start_node(i)
        cluster3.wait_all_up(240)
        restart_s = time.time() - started

        resumed = time.time()
        src = start_source(sspark, src_opts, collector, src_ck)
        sink = start_sink(sspark, {**options, "queue": stream_q}, sink_ck)
        running(lambda: collector.arrivals and collector.arrivals[-1] > resumed, 180, src, sink)
        resume_s = collector.arrivals[-1] - resumed
        time.sleep(AFTER_S)
        for query, qname in ((src, "source"), (sink, "sink")):
            assert query.isActive and query.exception() is None, f"the {qname} query stopped"
    except BaseException:
        abandon(procs, stop, src, sink)
        raise
    finally:
        stop.set()
    results = [out.get(timeout=700) for _ in procs]
    for p in procs:
        p.join(30)
    sink.stop()
    sink.awaitTermination(60)
    assert sink.exception() is None, sink.exception()
    to_stream = [r for r in results if r[0] == "producer" and r[1] and r[1][0].startswith("sp-")]
    assert len(to_stream) == 1
    stream_errors = [e for e in to_stream[0][2] if not e.startswith(OUTAGE_ERRORS)]
    assert stream_errors == [], stream_errors[:3]
    results = [r for r in results if r is not to_stream[0]]
    must_have = {f"rate-{k}" for k in range(committed + committed_rate_rows(sink))} | set(
        to_stream[0][1]
    )
    admin = QueueClient.from_options(options)
    rows = live_rows(admin, stream_q)
    eventually(lambda: set(rows) <= set(collector.deliveries()), 240, 1.0)
    time.sleep(3)
    src.stop()
    assert src.exception() is None, src.exception()
    figures = check_outage_traffic(results)
    stream = assert_stream_accounted(collector, rows, must_have)
    assert admin.stats(stream_q)["backlog"] == 0
    admin.close()
    print(
        f"\nboth queries failed {failed_after:.1f} s after the stop; the cluster was back in "
        f"{restart_s:.0f} s; the restarted queries delivered again "
        f"{resume_s:.1f} s after their start; stream {stream['delivered']} messages, "
        f"{stream['replayed_in_same_batch']} again in a replay of the same batch; clients "
        f"{figures}"
    )
