"""A live view of one queue (`cassieq stats QUEUE --watch`, `make demo`).

``stats()`` is a snapshot: totals from counter columns plus the current state from a scan of the
live buckets. A rate needs two snapshots, so the view is a pure function of the previous and the
current :class:`Sample` (:func:`rows`); :func:`watch` only fetches, times and draws. On a
terminal the view is a rich table redrawn in place; anywhere else (a pipe, a log file, CI) it is
one plain line per refresh, so the output stays readable and greppable without escape codes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

Stats = Mapping[str, Any]


@dataclass(frozen=True)
class Sample:
    """One ``stats()`` answer and when it came back (seconds on a monotonic clock)."""

    at: float
    stats: Stats


@dataclass(frozen=True)
class Row:
    """One line of the view: ``key`` names it in plain output, ``label`` on a terminal."""

    key: str
    label: str
    value: str
    rate: str = ""


def rate(prev: Sample | None, cur: Sample, counter: str) -> float | None:
    """Per-second change of a total between two samples; None when it cannot be known yet."""
    if prev is None or counter not in cur.stats or counter not in prev.stats:
        return None
    elapsed = cur.at - prev.at
    if elapsed <= 0:
        return None
    delta = int(cur.stats[counter]) - int(prev.stats[counter])
    if delta < 0:
        # Totals only grow; a drop means the queue was deleted and created again in between.
        return None
    return delta / elapsed


def _count(stats: Stats, key: str) -> str:
    value = stats.get(key)
    return "-" if value is None else f"{int(value):,}"


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}/s"


def rows(prev: Sample | None, cur: Sample) -> list[Row]:
    """What the view shows for ``cur``, with rates against ``prev`` (None: the first sample)."""
    s = cur.stats
    out = [
        Row("backlog", "backlog (visible)", _count(s, "backlog")),
        Row("in_flight", "in flight", _count(s, "in_flight")),
        Row("delayed", "delayed", _count(s, "delayed")),
        Row("oldest_age", "oldest visible", f"{float(s.get('oldest_age_seconds') or 0.0):,.1f} s"),
        Row(
            "enqueued", "enqueued", _count(s, "enqueued"), _per_second(rate(prev, cur, "enqueued"))
        ),
        Row("acked", "acked", _count(s, "acked"), _per_second(rate(prev, cur, "acked"))),
        Row("dead_lettered", "dead-lettered", _count(s, "dead_lettered")),
        Row("lost", "lost (never written)", _count(s, "lost")),
    ]
    if "consumer" in s:
        out.append(Row("consumer", "consumer (lease)", str(s["consumer"] or "-")))
    out += [
        Row("next_id", "next id", _count(s, "next_id")),
        Row("reader", "reader pointer", _count(s, "reader_pointer")),
        Row("repair", "repair pointer (bucket)", _count(s, "repair_pointer")),
        Row("open_reservations", "open reservations", _count(s, "open_reservations")),
    ]
    return out


def line(prev: Sample | None, cur: Sample) -> str:
    """The plain one-line form: ``key=value`` pairs, rates in parentheses."""
    parts = [f"queue={cur.stats.get('queue', '?')}"]
    for row in rows(prev, cur):
        # Digits without separators or spaces, so a script can split on them.
        value = row.value.replace(",", "").replace(" ", "")
        per_second = f" ({row.rate.replace(',', '')})" if row.rate else ""
        parts.append(f"{row.key}={value}{per_second}")
    return " ".join(parts)


def table(prev: Sample | None, cur: Sample, interval: float | None = None) -> Table:
    """The terminal form: a two-column table plus the rates."""
    every = f", every {interval:g} s" if interval else ""
    t = Table(
        title=f"queue {cur.stats.get('queue', '?')}",
        caption=f"{time.strftime('%H:%M:%S')}{every}, Ctrl-C stops",
        title_justify="left",
    )
    t.add_column("")
    t.add_column("now", justify="right")
    t.add_column("rate", justify="right")
    for row in rows(prev, cur):
        t.add_row(row.label, row.value, row.rate)
    return t


def watch(
    fetch: Callable[[], Stats],
    interval: float,
    count: int | None = None,
    console: Console | None = None,
    stop: threading.Event | None = None,
    on_sample: Callable[[Sample, Sample | None], None] | None = None,
    plain: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Fetch, draw, wait ``interval`` seconds; ``count`` refreshes (None: until ``stop`` is set
    or the caller's Ctrl-C). ``on_sample(cur, prev)`` sees every sample (the demo keeps them for
    its plot); ``plain`` receives the plain lines when ``console`` is not a terminal. Returns the
    number of refreshes drawn."""
    console = console or Console()
    stop = stop or threading.Event()

    def stamped(text: str) -> None:
        console.print(
            f"{time.strftime('%H:%M:%S')} {text}", markup=False, highlight=False, soft_wrap=True
        )

    emit = plain or stamped
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    prev: Sample | None = None
    drawn = 0
    with live or nullcontext():
        while True:
            cur = Sample(clock(), fetch())
            if on_sample is not None:
                on_sample(cur, prev)
            if live is not None:
                live.update(table(prev, cur, interval), refresh=True)
            else:
                emit(line(prev, cur))
            drawn += 1
            prev = cur
            if (count is not None and drawn >= count) or stop.wait(interval):
                return drawn
