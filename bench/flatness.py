"""Suite 5: does consuming cost more on a queue with a long history than on a fresh one?

Two consumers, each on an "old" queue (``history`` messages already produced and consumed)
and on a fresh queue, the same ``rows`` consumed on each:

* ``source``: the streaming source, AvailableNow into the noop sink (needs the Spark source).
* ``client``: ``get`` + ``ack`` from ``QueueClient``.

The history is produced with ``put_many`` and acked the way the source acks, by moving the
reader pointer past it (see ``make_history``).

The figure is the ratio old/fresh of the consumption rates: 1.0 is flat.
"""

from __future__ import annotations

import logging
import time

from .common import BenchConfig, client, summarize, unique_queue
from .source import consume, fill

log = logging.getLogger("bench.flatness")

CLIENT_ROWS_QUICK = 200
CLIENT_ROWS_FULL = 2000


HISTORY_VIA = "put_many, then acked by moving the reader pointer past it (the source's ack)"


def make_history(c, cfg: BenchConfig) -> str:
    """A queue whose first ``flatness_history`` messages were produced and acked.

    Consuming millions through Spark or get/ack just to age a queue would dominate the run; the
    source acks a committed batch by moving the reader pointer, which is done here directly,
    so the old queue holds the same rows, reservations and pointers a consumed queue holds.
    """
    from cassieq_spark.engine.core import pointers

    t0 = time.perf_counter()
    name = unique_queue("flat-old")
    info = c.create_queue(name)
    fill(c, name, cfg.flatness_history)
    if not pointers.advance(c.conn, info, "reader", cfg.flatness_history):
        raise RuntimeError("could not move the reader pointer past the history")
    log.info(
        "flatness: history of %d built in %.1f s", cfg.flatness_history, time.perf_counter() - t0
    )
    return name


def _get_ack(c, queue: str, n: int) -> float:
    t0 = time.perf_counter()
    got = 0
    while got < n:
        m = c.get(queue)
        if m is None:
            raise RuntimeError(f"queue {queue} ran dry after {got} of {n} messages")
        if not c.ack(queue, m.pop_receipt):
            raise RuntimeError(f"ack of message {m.id} in {queue} was refused")
        got += 1
    return n / (time.perf_counter() - t0)


def run_client(cfg: BenchConfig, old_queue: str | None = None) -> dict:
    """get+ack rate on an old queue vs a fresh one (``old_queue``: one with a history already)."""
    n = CLIENT_ROWS_QUICK if cfg.quick else CLIENT_ROWS_FULL
    with client(cfg) as c:
        if old_queue is None:
            old_queue = make_history(c, cfg)
        old_rates, fresh_rates = [], []
        for rep in range(cfg.repeats):
            fill(c, old_queue, n, salt=100 + rep)
            old_rates.append(_get_ack(c, old_queue, n))
            fresh = unique_queue("flat-fresh")
            c.create_queue(fresh)
            fill(c, fresh, n, salt=100 + rep)
            fresh_rates.append(_get_ack(c, fresh, n))
            log.info(
                "flatness client rep %d: old %.0f/s fresh %.0f/s",
                rep,
                old_rates[-1],
                fresh_rates[-1],
            )
    return _result(cfg, n, old_rates, fresh_rates)


def run_source(spark, cfg: BenchConfig) -> dict:
    """Source consumption rate on an old queue vs a fresh one."""
    from .common import register_cassieq

    register_cassieq(spark)
    n = cfg.flatness_rows
    with client(cfg) as c:
        old = make_history(c, cfg)
        old_rates, fresh_rates = [], []
        for rep in range(cfg.repeats):
            fill(c, old, n, salt=200 + rep)
            r = consume(spark, cfg, old)
            if r["rows"] != n:
                raise RuntimeError(f"old queue run consumed {r['rows']} of {n}")
            old_rates.append(n / r["batch_seconds"])
            fresh = unique_queue("flat-src-fresh")
            c.create_queue(fresh)
            fill(c, fresh, n, salt=200 + rep)
            r = consume(spark, cfg, fresh)
            if r["rows"] != n:
                raise RuntimeError(f"fresh queue run consumed {r['rows']} of {n}")
            fresh_rates.append(n / r["batch_seconds"])
            log.info(
                "flatness source rep %d: old %.0f/s fresh %.0f/s",
                rep,
                old_rates[-1],
                fresh_rates[-1],
            )
    return _result(cfg, n, old_rates, fresh_rates)


def _result(cfg: BenchConfig, n: int, old_rates: list[float], fresh_rates: list[float]) -> dict:
    o, f = summarize(old_rates), summarize(fresh_rates)
    return {
        "history": cfg.flatness_history,
        "history_via": HISTORY_VIA,
        "rows": n,
        "old_rate": o,
        "fresh_rate": f,
        "ratio_old_vs_fresh": o["median"] / f["median"],
    }
