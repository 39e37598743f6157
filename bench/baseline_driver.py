"""Raw cassandra-driver baselines: what a user would write by hand, with the fastest pattern.

Write: the same rows into the same table layout (the engine's ``messages`` table, under a
queue of its own), prepared statement, unlogged batches per partition, a window of
``execute_async`` requests in flight, one process per core. No id reservation, no bookkeeping:
this is the ceiling the sink is compared against.

Scan: a plain paged read of a queue's rows, bucket by bucket, one process per core.

Each process connects and builds its rows before the common start signal, so the timed part is
the writing (or reading) alone.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections import deque
from dataclasses import dataclass

# Only the columns a message has: binding None for headers/visible_at would write a tombstone
# per cell, which no careful driver user does (the engine sends them as unset).
INSERT = (
    "INSERT INTO {ks}.messages (queue_id, bucket, id, payload, enqueued_at) VALUES (?, ?, ?, ?, ?)"
)
SCAN = (
    "SELECT id, payload, headers, enqueued_at FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
)

# Same per-batch limits as the engine; they come from the server's batch size warnings, not
# from the engine. 128 rows per batch was faster than 64 here; the byte cap keeps 1 KiB rows
# in batches of 24 rows.
BATCH_MAX_ROWS = 128
BATCH_MAX_BYTES = 24 * 1024
IN_FLIGHT = 64


@dataclass(frozen=True)
class Target:
    contact_points: str
    port: int
    keyspace: str
    queue_id: str
    bucket_size: int


def _session(t: Target):
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        consistency_level=ConsistencyLevel.LOCAL_QUORUM,
        request_timeout=60,
    )
    cluster = Cluster(
        contact_points=t.contact_points.split(","),
        port=t.port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        protocol_version=4,
    )
    return cluster, cluster.connect()


def _write_worker(t: Target, lo, hi, size, salt, ready, go, out, in_flight, batch_rows):
    import datetime as dt

    from cassandra.query import BatchStatement, BatchType

    from bench.common import payloads

    cluster, session = _session(t)
    try:
        stmt = session.prepare(INSERT.replace("{ks}", t.keyspace))
        qid = uuid.UUID(t.queue_id)
        data = payloads(hi - lo, size, salt)
        ready.put(1)
        go.wait()
        t0 = time.time()
        now = dt.datetime.now(dt.timezone.utc)
        futures: deque = deque()
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        rows = nbytes = 0
        cur_bucket = lo // t.bucket_size

        def submit(b):
            if len(futures) >= in_flight:
                futures.popleft().result()
            futures.append(session.execute_async(b))

        for mid in range(lo, hi):
            bucket = mid // t.bucket_size
            p = data[mid - lo]
            if rows and (
                bucket != cur_bucket or rows >= batch_rows or nbytes + len(p) > BATCH_MAX_BYTES
            ):
                submit(batch)
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                rows = nbytes = 0
            cur_bucket = bucket
            batch.add(stmt, (qid, bucket, mid, p, now))
            rows += 1
            nbytes += len(p) + 64
        if rows:
            submit(batch)
        for f in futures:
            f.result()
        out.put((t0, time.time(), hi - lo))
    except Exception as exc:  # reported to the parent, which raises it
        ready.put(1)
        out.put(("error", repr(exc)))
    finally:
        cluster.shutdown()


def _scan_worker(t: Target, buckets, ready, go, out, fetch_size):
    cluster, session = _session(t)
    try:
        stmt = session.prepare(SCAN.replace("{ks}", t.keyspace))
        stmt.fetch_size = fetch_size
        qid = uuid.UUID(t.queue_id)
        ready.put(1)
        go.wait()
        t0 = time.time()
        n = nbytes = 0
        for b in buckets:
            for row in session.execute(stmt, (qid, b)):
                n += 1
                nbytes += len(row.payload or b"")
        out.put((t0, time.time(), n))
    except Exception as exc:
        ready.put(1)
        out.put(("error", repr(exc)))
    finally:
        cluster.shutdown()


def _split(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    n = hi - lo
    edges = [lo + n * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts) if edges[i + 1] > edges[i]]


def write_rows(
    target: Target,
    first_id: int,
    n: int,
    payload_size: int,
    processes: int,
    in_flight: int = IN_FLIGHT,
    batch_rows: int = BATCH_MAX_ROWS,
) -> dict:
    """Write ``n`` rows with ids ``first_id..`` using ``processes`` processes; returns the rate."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_write_worker,
            args=(target, lo, hi, payload_size, i, ready, go, out, in_flight, batch_rows),
        )
        for i, (lo, hi) in enumerate(_split(first_id, first_id + n, processes))
    ]
    seconds, rows = _release(procs, ready, go, out)
    return {"rows": rows, "seconds": seconds, "rate": rows / seconds}


def scan_rows(target: Target, buckets: list[int], processes: int, fetch_size: int = 5000) -> dict:
    """Read every row of ``buckets`` (split over ``processes``); returns the rate."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    groups = [buckets[i::processes] for i in range(processes)]
    procs = [
        ctx.Process(target=_scan_worker, args=(target, g, ready, go, out, fetch_size))
        for g in groups
        if g
    ]
    seconds, rows = _release(procs, ready, go, out)
    return {"rows": rows, "seconds": seconds, "rate": rows / seconds if seconds else 0.0}


def _release(procs, ready, go, out) -> tuple[float, int]:
    """Start the workers, release them together; (seconds from release to last end, rows)."""
    for p in procs:
        p.start()
    try:
        for _ in procs:
            _get(ready, procs, 180)
        go_at = time.time()
        go.set()
        results = [_get(out, procs, 900) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
    errors = [r[1] for r in results if r[0] == "error"]
    if errors:
        raise RuntimeError(f"baseline worker failed: {errors[0]}")
    return max(r[1] for r in results) - go_at, sum(r[2] for r in results)


def _get(q, procs, timeout: float):
    """``q.get`` that gives up early when a worker died without reporting (e.g. at import)."""
    import queue as queue_mod

    deadline = time.time() + timeout
    while True:
        try:
            return q.get(timeout=1.0)
        except queue_mod.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(
                    f"baseline worker exited with status {dead[0].exitcode} before reporting"
                ) from None
            if time.time() > deadline:
                raise TimeoutError(f"baseline workers silent for {timeout:.0f} s") from None
