"""Two data centers: one keyspace replicated to both, clients in each, a streaming query in one;
counted, and through the loss of the smaller data center.

A durable cluster of its own (CQL 29042, storage 27000, under ``.cassandra/twodc``): nodes 1
and 2 in dc1, node 3 in dc2 (GossipingPropertyFileSnitch, a rackdc file per node), the queue's
keyspace ``NetworkTopologyStrategy {dc1: 2, dc2: 1}``.

- The defaults (``LOCAL_QUORUM``, ``LOCAL_SERIAL``) are refused for that keyspace, at connect
  and at bootstrap, with a ``ConfigError`` naming the keyspace, its data centers and the
  settings to use (two data centers' ``LOCAL_SERIAL`` rounds on one row both win).
- With ``consistency=QUORUM`` and ``serialConsistency=SERIAL`` (a quorum is 2 of 3 replicas,
  wherever they are) clients run in both data centers (``localDc`` dc1 and dc2) and a sink and
  a source query in dc1. The source's consumer lease is one for the queue across both data
  centers: a dc2 client's ``get`` on the stream's queue is refused while the dc1 query holds it.
  Producers in both data centers write one queue, consumers in both consume it: every message
  is delivered and acked once (0 lost, 0 duplicates).
- Node 3 (all of dc2) stopped gracefully under that load for ``OUTAGE_S``, then started again.
  dc1 keeps a quorum, so dc1's clients and both queries see no error, and neither the stream
  nor dc1's acks stop for more than ``RESUME_BOUND_S``. dc2's clients (their requests go to
  dc2's nodes only) fail with ``CassandraUnavailableError`` naming dc2 and the way out (another
  ``localDc``, or wait), within ``FAIL_WITHIN_S``; a dc2 client connecting meanwhile gets a
  ``ConnectionFailedError`` saying the same; all of them work again within
  ``RECOVER_WITHIN_S`` of node 3 being back. Nothing a producer was told is written is lost.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.cluster_faults import (
    OUTAGE_ERRORS,
    Faults,
    check_outage_traffic,
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
    running,
    start_sink,
    start_source,
)

from cassieq_spark import QueueClient
from cassieq_spark.errors import ConfigError, QueueBusyError

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

# Ports and directory of this cluster only: 9042/7000 (a CI run), 19042/17000 (the shared
# 3-node cluster) and 49142 (the shared test node) belong to others.
TWO_DC_PORT = 29042
TWO_DC_STORAGE_PORT = 27000
LAYOUT = (("dc1", 2), ("dc2", 1))
REPLICATION = {"class": "NetworkTopologyStrategy", "dc1": 2, "dc2": 1}
GLOBAL_LEVELS = {"consistency": "QUORUM", "serialConsistency": "SERIAL"}
KEYSPACE = "cassieq_two_dc"

OUTAGE_S = 20.0
AFTER_S = 10.0
# dc1 keeps a quorum: neither the stream nor dc1's client acks stop longer than this.
RESUME_BOUND_S = 25.0
# A dc2 request fails once the driver has found no dc2 node to send it to, and resent it while
# the driver reconnects (engine/store/failures.py: UNSENT_RETRY_DELAYS, 5.5 s), or once a
# request node 3 held when it stopped timed out (the 20 s request timeout).
FAIL_WITHIN_S = 30.0
# dc2's clients reconnect to node 3 within the driver's reconnection delay (2 s at most) once it
# answers; a loaded machine's first requests to a node that has just started are slow.
RECOVER_WITHIN_S = 30.0
PROBE_EVERY_S = 0.5


@pytest.fixture(scope="module")
def two_dc() -> Iterator[Faults]:
    cluster = durable_cluster(
        3, TWO_DC_PORT, TWO_DC_STORAGE_PORT, "twodc", heap="384M", data_centers=LAYOUT
    )
    with faults_on(cluster, up_timeout=240) as faults:  # stops only the nodes this module started
        try:
            yield faults
        finally:
            # Killed, not drained (10-15 s a node): the next run wipes this cluster anyway.
            for index in range(1, cluster.nodes + 1):
                if cluster.is_node_running(index):
                    faults.kill(index)


def options_in(faults: Faults, dc: str, **extra: str) -> dict[str, str]:
    return {**faults.client_options(KEYSPACE), "localDc": dc, **extra}


class Probe(threading.Thread):
    """A client of ``options`` in this process: put, get and ack on a queue of its own every
    ``PROBE_EVERY_S``; each round's start, end and error (the whole text) recorded."""

    def __init__(self, options: dict[str, str], queue: str):
        super().__init__(daemon=True)
        self.client = QueueClient.from_options(options)
        self.queue = queue
        self.rounds: list[tuple[float, float, str | None]] = []
        self.done = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.done.is_set():
            began = time.time()
            error = None
            try:
                self.client.put(self.queue, f"probe-{i}".encode())
                msg = self.client.get(self.queue, visibility_timeout=60)
                if msg is not None:
                    self.client.ack(self.queue, msg.pop_receipt)
            except Exception as exc:  # recorded: what a dc2 caller sees is the point
                error = f"{type(exc).__name__}: {exc}"
            self.rounds.append((began, time.time(), error))
            i += 1
            time.sleep(PROBE_EVERY_S)

    def failures_between(self, since: float, until: float) -> list[tuple[float, str]]:
        """(when it failed, its error) of the rounds begun in [since, until] that failed."""
        return [(e, err) for b, e, err in self.rounds if since <= b <= until and err is not None]

    def first_success_after(self, t: float) -> float | None:
        for began, ended, error in self.rounds:
            if began >= t and error is None:
                return ended
        return None

    def stop(self) -> None:
        self.done.set()
        self.join(60)
        self.client.close()


def test_the_nodes_report_the_data_centers_of_their_rackdc_files(two_dc: Faults) -> None:
    dcs = {h.address: h.datacenter for h in two_dc.watcher.metadata.all_hosts()}
    assert dcs == {"127.0.0.1": "dc1", "127.0.0.2": "dc1", "127.0.0.3": "dc2"}


def test_local_levels_are_refused_for_a_keyspace_in_two_data_centers(two_dc: Faults) -> None:
    """Checked where they are chosen: at bootstrap (right after it created the keyspace) and
    at every connect; the message names the keyspace, both data centers, the local levels and
    what to set instead. The keyspace it then bootstraps with the global levels is the next
    test's (a bootstrap of the whole schema takes 20-30 s on this cluster)."""
    ks = KEYSPACE
    two_dc.session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
    opts = {**two_dc.client_options(ks), "localDc": "dc1"}
    expected = rf"keyspace '{ks}' replicates to data centers dc1, dc2: serialConsistency "
    expected += r"LOCAL_SERIAL and consistency LOCAL_QUORUM .* use serialConsistency=SERIAL"
    # No keyspace yet at connect: nothing to check there.
    with QueueClient.from_options(opts) as client, pytest.raises(ConfigError, match=expected):
        client.bootstrap(create_keyspace=True, replication=REPLICATION)
    with pytest.raises(ConfigError, match=expected):
        QueueClient.from_options(opts)
    with pytest.raises(ConfigError, match="consistency LOCAL_QUORUM"):
        QueueClient.from_options({**opts, "serialConsistency": "SERIAL"})
    with QueueClient.from_options({**opts, **GLOBAL_LEVELS}) as client:
        assert client.bootstrap() > 0


def test_clients_in_both_data_centers_and_a_dc1_query_ride_through_the_loss_of_dc2(
    two_dc: Faults, sspark: Any, tmp_path: Any
) -> None:
    dc1 = options_in(two_dc, "dc1", **GLOBAL_LEVELS)
    dc2 = options_in(two_dc, "dc2", **GLOBAL_LEVELS)
    admin = QueueClient.from_options(dc1)
    admin.bootstrap(create_keyspace=True, replication=REPLICATION)
    stream_q, client_q, probe_q = (f"{k}_{uuid.uuid4().hex[:8]}" for k in ("s", "c", "p"))
    admin.create_queue(stream_q, bucket_size=200, repair_timeout=120)
    admin.create_queue(client_q)
    admin.create_queue(probe_q)

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    outs = {"dc1": ctx.Queue(), "dc2": ctx.Queue()}  # results by the client's data center
    # A producer into the stream's queue (dc1); into the clients' queue a producer and a
    # consumer in each data center.
    plan = [(produce, dc1, stream_q, "sp"), (produce, dc1, client_q, "p1")]
    plan += [(produce, dc2, client_q, "p2"), (consume, dc1, client_q, None)]
    plan += [(consume, dc2, client_q, None)]
    procs = []
    for target, opts, queue, tag in plan:
        out = outs[opts["localDc"]]
        args = (opts, queue, tag, stop, out) if tag else (opts, queue, stop, out)
        procs.append((opts["localDc"], ctx.Process(target=target, args=args)))

    collector = TimedCollector()
    src_opts = {**dc1, "queue": stream_q, "consumerId": f"{stream_q}-src"}
    src = start_source(sspark, src_opts, collector, str(tmp_path / "src"))
    sink = start_sink(sspark, {**dc1, "queue": stream_q}, str(tmp_path / "sink"))
    probe = Probe(dc2, probe_q)
    seen: dict[str, Any] = {}
    try:
        running(lambda: len(collector.arrivals) >= 3, 180, src, sink)
        # One lease for the queue across both data centers: the dc1 query's, seen from dc2.
        with (
            QueueClient.from_options(dc2) as dc2_client,
            pytest.raises(QueueBusyError, match=f"{stream_q}-src"),
        ):
            dc2_client.get(stream_q)
        for _, p in procs:
            p.start()
        probe.start()
        time.sleep(10)  # traffic in both data centers first

        stopped = time.time()
        two_dc.stop(3)  # graceful: all of dc2
        two_dc.wait_down(3)
        seen["down_after_s"] = time.time() - stopped
        # A dc2 client connecting now: its data center has no node up.
        try:
            QueueClient.from_options({**dc2, "requestTimeout": "19"}).close()
            seen["connect_error"] = None
        except Exception as exc:
            seen["connect_error"] = f"{type(exc).__name__}: {exc}"
        time.sleep(max(0.0, OUTAGE_S - (time.time() - stopped)))

        restarted = time.time()
        seen["restart_s"] = two_dc.restart(3, 240)
        back = time.time()
        eventually(lambda: probe.first_success_after(back), RECOVER_WITHIN_S + 30, 0.5)
        time.sleep(AFTER_S)
        for query, qname in ((src, "source"), (sink, "sink")):
            assert query.isActive and query.exception() is None, f"the {qname} query stopped"
    except BaseException:
        probe.done.set()
        abandon([p for _, p in procs], stop, src, sink)
        raise
    finally:
        stop.set()
    probe.stop()
    by_dc: dict[str, list[tuple]] = {"dc1": [], "dc2": []}
    for dc, _ in procs:
        by_dc[dc].append(outs[dc].get(timeout=700))
    for _, p in procs:
        p.join(30)
    sink.stop()
    sink.awaitTermination(60)
    assert sink.exception() is None, sink.exception()

    to_stream = [r for r in by_dc["dc1"] if r[0] == "producer" and r[1] and r[1][0][:3] == "sp-"]
    assert len(to_stream) == 1
    # The clients' queue, both data centers: what the counts below are about.
    results = [r for r in (*by_dc["dc1"], *by_dc["dc2"]) if r is not to_stream[0]]
    dc1_errors = [e for r in by_dc["dc1"] for e in r[2]]
    dc2_errors = [e for r in by_dc["dc2"] for e in r[2]]
    dc1_consumer = next(r for r in by_dc["dc1"] if r[0] == "consumer")
    dc2_consumer = next(r for r in by_dc["dc2"] if r[0] == "consumer")

    must_have = {f"rate-{k}" for k in range(committed_rate_rows(sink))} | set(to_stream[0][1])
    rows = live_rows(admin, stream_q)
    try:
        eventually(lambda: set(rows) <= set(collector.deliveries()), 240, 1.0)
        time.sleep(3)  # a late duplicate would show up here
        # The last batch is acked when Spark plans the next one: wait with the query running.
        eventually(lambda: admin.stats(stream_q)["backlog"] == 0, 60, 1.0)
    finally:
        src.stop()
    assert src.exception() is None, src.exception()
    failures = probe.failures_between(stopped, back)
    clear = [err for _, err in failures if err.startswith("CassandraUnavailableError")]
    recovered = probe.first_success_after(back)
    pause = collector.longest_pause(stopped, back + 10)
    acks_dc1 = sorted(done for _, _, _, done in dc1_consumer[1])
    ack_gap = max(
        (b - a for a, b in zip(acks_dc1, acks_dc1[1:], strict=False) if b > stopped and a < back),
        default=0.0,
    )
    figures = {
        "stream_delivered": len(collector.deliveries()),
        "client_messages": sum(len(r[1]) for r in results if r[0] == "producer"),
        "client_acked": sum(len(r[1]) for r in results if r[0] == "consumer"),
        "dc1_errors": len(dc1_errors),
        "dc2_errors": dict(collections.Counter(e.split(":")[0] for e in dc2_errors)),
        "longest_stream_pause_s": round(pause, 1),
        "longest_dc1_ack_pause_s": round(ack_gap, 1),
        "longest_dc1_call_s": round(max(r[3] for r in by_dc["dc1"]), 1),
        "dc2_failed_after_s": round(failures[0][0] - stopped, 1) if failures else None,
        "dc2_probe_failures": dict(collections.Counter(e.split(":")[0] for _, e in failures)),
        "dc2_recovered_after_s": None if recovered is None else round(recovered - back, 1),
        "dc2_unserved_s": round(recovered - failures[0][0], 1) if recovered and failures else None,
        "node3_restart_s": round(seen["restart_s"], 1),
        "node3_down_seen_after_s": round(seen["down_after_s"], 1),
        "dc2_consumer_acks_after_back": sum(1 for *_, done in dc2_consumer[1] if done > back),
    }
    print(
        f"\ntwo data centers, dc2 stopped for {OUTAGE_S:.0f} s (started again {restarted - stopped:.0f} s after the stop): {figures}"
    )
    print(f"dc2 caller's error: {clear[0] if clear else failures[:1]}")
    print(f"dc2 connect during the outage: {seen['connect_error']}")

    # dc1: nothing of the outage reaches a caller; nothing stops for long.
    assert dc1_errors == [], f"errors reached dc1's callers: {dc1_errors[:3]}"
    assert pause < RESUME_BOUND_S, f"the stream stopped for {pause:.1f} s"
    assert ack_gap < RESUME_BOUND_S, f"dc1's consumer acked nothing for {ack_gap:.1f} s"
    assert figures["longest_dc1_call_s"] < RESUME_BOUND_S, figures
    # Counted, across both data centers: every put that returned delivered and acked once.
    check_outage_traffic(results)
    stream = assert_stream_accounted(collector, rows, must_have)
    print(f"stream: {stream}")
    assert admin.stats(stream_q)["backlog"] == 0
    # dc2: fails clearly, then works again.
    assert all(e.startswith(OUTAGE_ERRORS) for e in dc2_errors), dc2_errors[:3]
    assert failures, "no dc2 call failed while dc2 was down"
    assert failures[0][0] - stopped < FAIL_WITHIN_S, f"dc2 failed first after {figures}"
    assert all(e.startswith(OUTAGE_ERRORS) for _, e in failures), failures[:3]
    assert clear, f"no CassandraUnavailableError at the dc2 caller: {failures[:3]}"
    assert all("data center 'dc2'" in e and "localDc" in e for e in clear), clear[0]
    assert seen["connect_error"] is not None, "a dc2 client connected while dc2 was down"
    assert seen["connect_error"].startswith("ConnectionFailedError"), seen["connect_error"]
    assert "data center 'dc2'" in seen["connect_error"], seen["connect_error"]
    assert recovered is not None and recovered - back < RECOVER_WITHIN_S, figures
    admin.close()
