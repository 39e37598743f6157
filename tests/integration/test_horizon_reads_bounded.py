"""Every read of the reservations is bounded, whatever the backlog: a closed reservation is a row
tombstone until compaction after gc_grace, and Cassandra aborts a read that walks past
``tombstone_failure_threshold`` of them (100,000 by default). Single puts leave one per id.

With the step shrunk to 50 ids, 300 single puts and no consumer, each read of ``monoton`` by
every reader that looks at the whole backlog (the default stream plan, the AvailableNow
target, stats, peek, the batch snapshot, purge) walks at most one step of tombstones, as
Cassandra's own trace counts them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.stream import snapshot
from cassieq_spark.engine.stream.consumer import StreamConsumer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

STEP = 50
PUTS = 300
_READ = re.compile(r"Read (\d+) live rows and (\d+) tombstone cells")


@contextmanager
def traced_monoton_reads(conn) -> Iterator[list]:
    """Trace every statement that reads ``monoton`` through ``conn``; yields their results."""
    results: list = []
    execute = conn.session.execute

    def traced(stmt, *args, **kw):
        text = getattr(stmt, "query_string", None) or getattr(
            getattr(stmt, "prepared_statement", None), "query_string", ""
        )
        if "monoton" in text and text.lstrip().upper().startswith("SELECT"):
            rs = execute(stmt, *args, trace=True, **kw)
            results.append((text, rs))
            return rs
        return execute(stmt, *args, **kw)

    conn.session.execute = traced
    try:
        yield results
    finally:
        del conn.session.execute


def tombstones_per_read(results) -> list[tuple[int, str]]:
    out = []
    for text, rs in results:
        trace = rs.get_query_trace(max_wait_sec=10)
        walked = [int(m.group(2)) for e in trace.events if (m := _READ.search(e.description))]
        out.append((max(walked, default=0), text))
    return out


# Tombstone counts are what this is about, not compare-and-set outcomes: without lost replies.
@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)
def test_whole_backlog_readers_walk_one_step_of_closed_reservations_per_read(
    queue_client, queue_name, monkeypatch
):
    """G5: `monoton.horizon` without a window read every reservation row from the reader to
    the counter in one statement (here "Read 1 live rows and 300 tombstone cells"): past
    100,000 single puts behind a stopped stream, the stream could not plan, `stats` failed."""
    monkeypatch.setattr(monoton, "HORIZON_STEP", STEP, raising=False)
    conn = queue_client.conn
    info = queue_client.create_queue(queue_name, repair_timeout=30)
    for _ in range(PUTS):
        monoton.close(conn, info, monoton.reserve(conn, info, 1)).result()
    stream = StreamConsumer(conn, info, "stream:bounded", 30.0)
    readers: list[tuple[str, Callable[[], object]]] = [
        ("horizon", lambda: monoton.horizon(conn, info, 0)),
        ("stats", lambda: queue_client.stats(queue_name)),
        ("peek", lambda: queue_client.peek(queue_name)),
        ("snapshot", lambda: snapshot.take(conn, info)),
        ("stream plan", lambda: stream.plan(stream.initial())),
        ("AvailableNow target", stream.fix_target),
        ("the stream stops", stream.lease.release),
        ("purge", lambda: queue_client.purge(queue_name)),
        ("stats after the purge", lambda: queue_client.stats(queue_name)),
    ]
    seen = {}
    for name, read in readers:
        with traced_monoton_reads(conn) as results:
            read()
        seen[name] = tombstones_per_read(results)
    worst = {name: max((n for n, _ in reads), default=0) for name, reads in seen.items()}
    assert all(n <= STEP for n in worst.values()), (worst, seen)
    assert monoton.horizon(conn, info, 0).next_id == PUTS
    assert queue_client.stats(queue_name)["next_id"] == PUTS
