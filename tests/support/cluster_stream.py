"""Spark streaming queries under cluster faults, counted: a foreachBatch collector that times
batch arrivals, the sink and source the fault tests start, and the checks that every row is
accounted for (delivered once, or again only inside a replay of the same Spark batch)."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from cassieq_spark import QueueClient
from cassieq_spark.engine.core import monoton, pointers
from cassieq_spark.engine.core.messages import HEADER_ORIGIN_ID, read_one, read_range
from cassieq_spark.engine.core.pointers import LEASE_READ
from cassieq_spark.engine.upkeep.ranges import skipped_ranges
from support.cluster_faults import eventually


class TimedCollector:
    """A foreachBatch sink (runs in this process): ids per batch id, and when each batch with
    rows arrived, so the test can tell how long a fault stopped the stream."""

    def __init__(self) -> None:
        self.batches: dict[int, list[int]] = collections.defaultdict(list)
        self.values: dict[int, str] = {}
        # A copy repair republished (under a new id) -> the id it copies, from its headers.
        self.copies: dict[int, int] = {}
        self.arrivals: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("id", "value", "headers").collect()
        with self.lock:
            self.batches[batch_id].extend(r.id for r in rows)
            for r in rows:
                self.values[r.id] = bytes(r.value).decode()
                origin = (r.headers or {}).get(HEADER_ORIGIN_ID)
                if origin is not None:
                    self.copies[r.id] = int(origin)
            if rows:
                self.arrivals.append(time.time())

    def copied(self) -> set[int]:
        """Ids delivered through a copy repair made of them."""
        with self.lock:
            return set(self.copies.values())

    def deliveries(self) -> collections.Counter[int]:
        with self.lock:
            return collections.Counter(i for ids in self.batches.values() for i in ids)

    def batches_of(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = collections.defaultdict(set)
        with self.lock:
            for batch, ids in self.batches.items():
                for i in ids:
                    out[i].add(batch)
        return out

    def longest_pause(self, since: float, until: float) -> float:
        """The longest time without a batch of rows between ``since`` and ``until``."""
        with self.lock:
            times = [since, *(t for t in self.arrivals if since < t < until), until]
        return max(b - a for a, b in zip(times, times[1:], strict=False))


# Spark waits a fixed 10 s for a new Python worker to connect back; on a machine at load 20-25
# the worker of a query's data source (a fresh interpreter) took longer, and the query died
# before its first batch with this message: nothing of it had run, so it is started again.
WORKER_START_FAILURE = "Python worker failed to connect back"
START_ATTEMPTS = 3


def started(start: Callable[[], Any], timeout: float = 120.0) -> Any:
    """``start()`` a query and wait for its first progress report; a query that dies of
    ``WORKER_START_FAILURE`` before any is started again (the same checkpoint), at most
    ``START_ATTEMPTS`` times. Any other outcome is the caller's to judge."""
    for attempt in range(1, START_ATTEMPTS + 1):
        query = start()
        deadline = time.monotonic() + timeout
        while query.isActive and query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.5)
        failed = not query.isActive and WORKER_START_FAILURE in str(query.exception())
        if not failed or attempt == START_ATTEMPTS:
            return query
        print(f"\na query's Python worker did not connect back in time; start {attempt + 1}")
    raise AssertionError("unreachable")


def make_active(spark: Any) -> None:
    """Make ``spark`` the active session of this thread's JVM side again. Spark resolves
    ``format("cassieq")`` (a Python data source) through the calling thread's active session;
    after queries of this session failed, a ``writeStream...start()`` once found another active
    session there and failed with ``DATA_SOURCE_NOT_FOUND`` (docs/status.md)."""
    spark._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)


def start_source(spark: Any, options: dict[str, str], collector: TimedCollector, ck: str) -> Any:
    make_active(spark)

    def start() -> Any:
        reader = spark.readStream.format("cassieq")
        for k, v in options.items():
            reader = reader.option(k, v)
        return (
            reader.load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", ck)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    return started(start)


def start_sink(spark: Any, options: dict[str, str], ck: str, rows_per_second: int = 20) -> Any:
    make_active(spark)
    rate = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", str(rows_per_second))
        .load()
        .selectExpr("concat('rate-', CAST(value AS STRING)) AS value")
    )
    return started(
        lambda: (
            rate.writeStream.format("cassieq")
            .options(**options)
            .option("checkpointLocation", ck)
            .trigger(processingTime="1 second")
            .start()
        )
    )


def running(check: Any, timeout: float, *queries: Any) -> None:
    """Wait for ``check()``; fail at once, with its error, if one of ``queries`` stopped."""

    def ok() -> bool:
        for q in queries:
            if not q.isActive:
                raise AssertionError(f"a query stopped: {str(q.exception())[-3000:]}")
        return bool(check())

    try:
        eventually(ok, timeout, 0.5)
    except AssertionError as exc:
        if "a query stopped" in str(exc):
            raise
        raise AssertionError(
            f"{exc}; progress: "
            + "; ".join(str((q.lastProgress or {}).get("batchId")) for q in queries)
        ) from None


def committed_rate_rows(sink: Any) -> int:
    """Rows of the sink's committed batches: the rate source numbers its rows 0, 1, ... in order,
    so rate-0 .. rate-(n-1) must all be delivered."""
    return sum(p["numInputRows"] for p in sink.recentProgress)


# A sink query's ``stop()`` returns once its stream thread ended and its job was cancelled, but
# a task's Python worker is killed only ``spark.python.task.killTimeout`` (2 s) later: a write
# under way can still close its block after ``stop()``. A count taken at once misses it.
SETTLE_S = 4.0


def _read_live(client: QueueClient, queue: str) -> dict[int, str]:
    info = client.get_queue(queue)
    next_id = monoton.horizon(client.conn, info, 0).next_id
    rows = read_range(client.conn, info, 0, next_id, "id, dead, payload")
    return {r.id: bytes(r.payload).decode() for r in rows if not r.dead}


def live_rows(client: QueueClient, queue: str, timeout: float = 60.0) -> dict[int, str]:
    """The queue's live messages by id, read from its rows (not from the counters), once two
    reads ``SETTLE_S`` apart agree: a just-stopped sink may still be finishing a write."""
    deadline = time.monotonic() + timeout
    rows = _read_live(client, queue)
    while True:
        time.sleep(SETTLE_S)
        again = _read_live(client, queue)
        if again == rows:
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(
                f"queue {queue!r} still grows {timeout:.0f} s after its writers stopped: "
                f"{len(rows)} then {len(again)} live rows"
            )
        rows = again


def rows_after_repair(client: QueueClient, queue: str, before: dict[int, str]) -> dict[int, str]:
    """The queue's live messages by id once a repair pass ran after ``before`` was read: rows of
    ``before`` that repair reclaimed (consumed buckets, deleted) stay expected, those it marked
    dead (republished under a new id) no longer are, and its copies are."""
    info = client.get_queue(queue)
    next_id = monoton.horizon(client.conn, info, 0).next_id
    now = {r.id: r for r in read_range(client.conn, info, 0, next_id, "id, dead, payload")}
    rows = {i: payload for i, payload in before.items() if i not in now}
    rows.update({i: bytes(r.payload).decode() for i, r in now.items() if not r.dead})
    return rows


def explain_missing(client: QueueClient, queue: str, rows: dict[int, str], seen: Any) -> str:
    """For a failure message: the expected ids never delivered, each with its row as stored, the
    reservations around them and the queue's pointers, so a CI log alone can tell a skip from a
    row that is still waiting for the source or for repair."""
    missing = sorted(set(rows) - set(seen))
    if not missing:
        return "nothing missing"
    info = client.get_queue(queue)
    lines = [f"{len(missing)} of {len(rows)} expected ids never delivered: {missing[:20]}"]
    lines.append(f"pointers: {pointers.read(client.conn, info)}")
    for i in missing[:8]:
        row = read_one(client.conn, info, i, "id, version, deliveries, acked, dead, enqueued_at")
        lines.append(f"  id {i}: row {row}")
    lo = max(0, missing[0] - monoton.MAX_BLOCK)
    res = client.conn.execute(
        "SELECT lo, hi, next, created_at, closed, released, owner FROM {ks}.monoton"
        " WHERE queue_id = ? AND lo >= ? AND lo <= ?",
        (info.queue_id, lo, missing[-1]),
    )
    near = [r for r in res if r.hi is None or r.hi > missing[0]]
    lines += [f"  reservation {r}" for r in near[:40]]
    lines += [
        f"  skipped range {r}"
        for r in skipped_ranges(client.conn, info)
        if r.hi > missing[0] and r.lo <= missing[-1]
    ][:20]
    return "\n".join(lines)


def assert_stream_accounted(
    collector: TimedCollector, rows: dict[int, str], must_have: set[str]
) -> dict[str, int]:
    """Every live row delivered; a second delivery only inside a replay of the same batch."""
    seen = collector.deliveries()
    missing = set(rows) - set(seen)
    assert not missing, (
        f"{len(missing)} of {len(rows)} messages never delivered: {sorted(missing)[:10]}"
    )
    stray = set(seen) - set(rows)
    assert not stray, f"ids delivered that the queue never had: {sorted(stray)[:10]}"
    batches_of = collector.batches_of()
    across = {i: b for i, b in batches_of.items() if len(b) > 1}
    assert not across, f"ids delivered in two different batches: {dict(list(across.items())[:5])}"
    values = set(collector.values.values())
    lost = must_have - values
    assert not lost, f"rows of committed sink batches never delivered: {sorted(lost)[:10]}"
    replayed = sum(n - 1 for n in seen.values() if n > 1)
    return {"delivered": len(seen), "replayed_in_same_batch": replayed}


def abandon(procs: list, stop: Any, *queries: Any) -> None:
    """A failed run: end the client processes and the queries without waiting for results."""
    stop.set()
    for p in procs:
        if p.pid is None:  # never started
            continue
        if p.is_alive():
            p.terminate()
        p.join(10)
    for query in queries:
        with contextlib.suppress(Exception):  # the failure being reported matters more
            query.stop()


def lease_coordinator(admin: QueueClient, queue: str) -> str:
    """The address the driver sends the queue's lease compare-and-sets to first: the first
    replica of its pointers row (token-aware routing, replicas not shuffled)."""
    conn = admin.conn
    info = admin.get_queue(queue)
    key = conn.prepare(LEASE_READ).bind((info.queue_id,)).routing_key
    replicas = conn.cluster.metadata.get_replicas(conn.config.keyspace, key)
    return str(replicas[0].address)


def queue_led_by(admin: QueueClient, address: str, prefix: str) -> str:
    """A new queue whose lease row's first replica is ``address`` (queues are created until one
    is: its id, hence its token, is random)."""
    for _ in range(30):
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        admin.create_queue(name, bucket_size=200, repair_timeout=120)
        if lease_coordinator(admin, name) == address:
            return name
        admin.delete_queue(name)
    raise AssertionError(f"no queue led by {address} in 30 tries")
