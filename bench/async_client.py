"""Suite async_client: ``get_many`` + ``ack_many`` throughput of the asyncio client against the
synchronous one, at the same concurrency in one process.

Each repeat fills two fresh queues with the same number of 100-byte messages (untimed) and
drains one with :class:`~cassieq_spark.QueueClient` on ``TASKS`` threads (each thread a client
of its own on one connection, as the service does), the other with
:class:`~cassieq_spark.AsyncQueueClient` on ``TASKS`` tasks of one event loop (one thread); the
two alternate, so a drift in the machine's load hits both alike. Every consumer loops
``get_many(10)`` then ``ack_many`` of what it got until all are acked. Before a figure is
reported the work is counted: no id acked twice, and the queue's stats agree with the acks
counted. A call that fails (a client timeout on a loaded
machine) is counted and the consumer goes on; what it held comes back after the visibility
timeout and is counted then. A drain ends when every message is acked, or after ``STALL``
seconds without an ack (a message redelivered to nobody for minutes was seen once at load 26);
what is left then is counted against the queue's stats and reported (``left_after_stall``).
The figure is messages acked per second, wall clock
from the first receive to the last ack; the ratio is async / sync.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

from .common import BenchConfig, client, payloads, summarize, unique_queue

log = logging.getLogger("bench.async_client")

TASKS = 50
BATCH = 10
MESSAGES_QUICK = 1000
MESSAGES_FULL = 20_000
DEADLINE = 300.0  # seconds per drain, a stuck run fails instead of hanging
VISIBILITY = 20.0
STALL = 45.0  # seconds without an ack end a drain: what is left is counted and reported


def _fill(c, queue: str, n: int, salt: int) -> list[int]:
    # A long visibility timeout and a high delivery limit: a call that fails (a client timeout
    # on a loaded machine) after its claim applied must not push a message to a drop.
    c.create_queue(queue, visibility_timeout=VISIBILITY, max_delivery_count=100)
    ids: list[int] = []
    data = payloads(n, 100, salt)
    for i in range(0, n, 5000):
        ids += c.put_many(queue, data[i : i + 5000])
    return ids


def _check(c, queue: str, ids: list[int], acks: collections.Counter) -> int:
    """The drain's work counted: no id acked twice, nothing acked that was not put, and the
    queue's own counters agree; returns how many were left (stalled: see the module)."""
    if not set(acks) <= set(ids) or (acks and max(acks.values()) != 1):
        raise RuntimeError(f"{queue}: acked {sum(acks.values())} for {len(ids)} ids")
    s = c.stats(queue)
    left = len(ids) - len(acks)
    if s["acked"] != len(acks) or s["backlog"] + s["in_flight"] + s["delayed"] != left:
        raise RuntimeError(f"{queue}: stats after the drain {s}, {len(acks)} acked here")
    if left:
        log.warning(
            "%s: %d of %d messages left after %.0f s without an ack", queue, left, len(ids), STALL
        )
    return left


def drain_sync(c, queue: str, n: int, errors: list[str]) -> tuple[float, collections.Counter, set]:
    acks: collections.Counter = collections.Counter()
    delivered: set[int] = set()
    lock = threading.Lock()
    start = threading.Barrier(TASKS + 1)

    last_ack = [time.monotonic()]

    def consume() -> None:
        own = c.sibling()
        start.wait()
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            with lock:
                if sum(acks.values()) >= n or time.monotonic() - last_ack[0] > STALL:
                    return
            try:
                got = own.get_many(queue, BATCH)
                res = own.ack_many(queue, [m.pop_receipt for m in got]) if got else []
            except Exception as exc:  # counted; what it held comes back after the timeout
                log.warning("sync consumer: %s", exc)
                with lock:
                    errors.append(type(exc).__name__)
                continue
            if not got:
                time.sleep(0.01)
                continue
            with lock:
                delivered.update(m.id for m in got)
                acks.update(m.id for m, r in zip(got, res, strict=True) if r.ok)
                last_ack[0] = time.monotonic()

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(TASKS)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    last_ack[0] = t0
    for t in threads:
        t.join()
    return last_ack[0] - t0, acks, delivered


async def drain_async(
    ac, queue: str, n: int, errors: list[str]
) -> tuple[float, collections.Counter, set]:
    acks: collections.Counter = collections.Counter()
    delivered: set[int] = set()
    acked = 0
    t0 = last_ack = time.monotonic()

    async def consume() -> None:
        nonlocal acked, last_ack
        deadline = time.monotonic() + DEADLINE
        while acked < n and time.monotonic() < deadline and time.monotonic() - last_ack <= STALL:
            try:
                got = await ac.get_many(queue, BATCH)
                res = await ac.ack_many(queue, [m.pop_receipt for m in got]) if got else []
            except Exception as exc:  # counted; what it held comes back after the timeout
                log.warning("async consumer: %s", exc)
                errors.append(type(exc).__name__)
                continue
            if not got:
                await asyncio.sleep(0.01)
                continue
            delivered.update(m.id for m in got)
            for m, r in zip(got, res, strict=True):
                if r.ok:
                    acks[m.id] += 1
                    acked += 1
            last_ack = time.monotonic()

    await asyncio.gather(*(consume() for _ in range(TASKS)))
    return last_ack - t0, acks, delivered


def run(cfg: BenchConfig) -> dict:
    from cassieq_spark import AsyncQueueClient, QueueClient

    n = MESSAGES_QUICK if cfg.quick else MESSAGES_FULL
    sync_rates: list[float] = []
    async_rates: list[float] = []
    sync_errors: list[str] = []
    async_errors: list[str] = []
    sync_left: list[int] = []
    async_left: list[int] = []
    loop = asyncio.new_event_loop()
    try:
        with client(cfg) as c:
            ac = AsyncQueueClient(QueueClient.from_options(cfg.options()))
            # Warm-up, untimed: statements prepared on both connections.
            warm = unique_queue("sync-warm")
            drain_sync(c, warm, len(_fill(c, warm, TASKS * 4, salt=0)), [])
            warm = unique_queue("async-warm")
            loop.run_until_complete(drain_async(ac, warm, len(_fill(c, warm, TASKS * 4, 0)), []))
            for rep in range(cfg.repeats):
                q = unique_queue("sync")
                ids = _fill(c, q, n, salt=rep)
                secs, acks, _ = drain_sync(c, q, n, sync_errors)
                sync_left.append(_check(c, q, ids, acks))
                sync_rates.append(len(acks) / secs)
                q = unique_queue("async")
                ids = _fill(c, q, n, salt=rep)
                secs, acks, _ = loop.run_until_complete(drain_async(ac, q, n, async_errors))
                async_left.append(_check(c, q, ids, acks))
                async_rates.append(len(acks) / secs)
                log.info(
                    "async_client rep %d: sync %.0f/s, async %.0f/s",
                    rep,
                    sync_rates[-1],
                    async_rates[-1],
                )
            loop.run_until_complete(ac.close())
    finally:
        loop.close()
    s, a = summarize(sync_rates), summarize(async_rates)
    return {
        "messages": n,
        "tasks": TASKS,
        "batch": BATCH,
        "sync_rate": s,
        "async_rate": a,
        "ratio_async_vs_sync": a["median"] / s["median"],
        "left_after_stall": {"sync": sync_left, "async": async_left},
        "failed_calls": {
            "sync": dict(collections.Counter(sync_errors)),
            "async": dict(collections.Counter(async_errors)),
        },
        "ratios_by_repeat": [round(x / y, 3) for x, y in zip(async_rates, sync_rates, strict=True)],
    }
