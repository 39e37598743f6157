"""Lost ranges: ids repair counted as lost, kept so that a streaming query can report them.

Repair counts the ids of a skipped range that never arrived (a writer died holding its
reservation) in the ``lost`` counter and in the range's row; that row goes with its bucket,
often in the very pass that counted it. So repair also writes one ``lost_ranges`` row per range
with lost ids (which ids, up to :data:`MAX_IDS_KEPT`, and why), kept for the table's TTL (14
days). Nothing on the put or get path reads or writes it; a streaming query reads the queue's
partition once per trigger.

Each range is reported once: the query that reports it (by failing, or with a warning when
``failOnDataLoss`` is false) marks it with a compare-and-set, so a restart, or another query
on the queue later, goes on past it. Ranges that lay wholly before a new query's start were
never needed by it and are marked, not reported.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.clock import to_epoch
from ..core.queues import QueueInfo
from ..store.session import Connection

log = logging.getLogger(__name__)

# Ids of one range kept by name; the count is always exact.
MAX_IDS_KEPT = 100
CAUSE_NEVER_WRITTEN = (
    "reserved but never written: the producer died (or gave up) holding the reservation, and "
    "repair counted the ids lost after the repair timeout"
)
CAUSE_PURGED = (
    "purged (cassieq purge / QueueClient.purge) before a streaming query read them: written, "
    "then dropped by an operator"
)
BEFORE_START = "before-start:"
RETENTION_SECONDS = 1_209_600  # the table's default TTL


@dataclass(frozen=True)
class LostRange:
    lo: int
    hi: int
    lost: int
    ids: tuple[int, ...]  # the first MAX_IDS_KEPT lost ids
    cause: str
    counted_at: float | None


def record(
    conn: Connection,
    queue: QueueInfo,
    lo: int,
    hi: int,
    ids: Sequence[int],
    cause: str = CAUSE_NEVER_WRITTEN,
    count: int | None = None,
) -> None:
    """Keep a range repair counted lost ids in: called once per range, after the
    compare-and-set that made this repair the one that counts it. Or a range a purge dropped
    ``count`` messages in, ``ids`` naming the first. A plain insert: a retry writes the same
    row again."""
    if not ids:
        return
    conn.execute(
        "INSERT INTO {ks}.lost_ranges (queue_id, lo, hi, lost, ids, cause, counted_at) "
        "VALUES (?, ?, ?, ?, ?, ?, toTimestamp(now()))",
        (queue.queue_id, lo, hi, count or len(ids), list(ids[:MAX_IDS_KEPT]), cause),
    )


def unreported(conn: Connection, queue: QueueInfo) -> list[LostRange]:
    """The queue's lost ranges no streaming query has reported yet, oldest id first."""
    rows = conn.execute(
        "SELECT lo, hi, lost, ids, cause, counted_at, reported_by FROM {ks}.lost_ranges "
        "WHERE queue_id = ?",
        (queue.queue_id,),
    )
    out = []
    for r in rows:
        if r.reported_by is not None or r.hi is None:
            continue
        counted = to_epoch(r.counted_at) if isinstance(r.counted_at, dt.datetime) else None
        out.append(
            LostRange(
                r.lo,
                r.hi,
                int(r.lost or 0),
                tuple(r.ids or ()),
                r.cause or CAUSE_NEVER_WRITTEN,
                counted,
            )
        )
    return sorted(out, key=lambda x: x.lo)


def mark_reported(conn: Connection, queue: QueueInfo, rng: LostRange, by: str) -> bool:
    """Claim the report of ``rng`` for ``by``; False when someone reported it already."""
    token = f"{by}#{uuid.uuid4().hex[:8]}"
    key = (queue.queue_id, rng.lo)
    res = conn.cas(
        # The TTL: a row that expired meanwhile comes back as this one cell, and must go again.
        "UPDATE {ks}.lost_ranges USING TTL ? SET reported_by = ? WHERE queue_id = ? AND lo = ? "
        "IF reported_by = null",
        (RETENTION_SECONDS, token, *key),
        read="SELECT reported_by FROM {ks}.lost_ranges WHERE queue_id = ? AND lo = ?",
        read_params=key,
        applied=lambda row: row is not None and row.reported_by == token,
    )
    # A copy sent again after the first applied says "not applied" and shows our own token.
    return bool(res.was_applied) or getattr(res.one(), "reported_by", None) == token


def lost_ranges_count(conn: Connection, queue: QueueInfo) -> tuple[int, int]:
    """(ranges kept, of which not reported yet): for ``stats``."""
    rows = list(
        conn.execute(
            "SELECT hi, reported_by FROM {ks}.lost_ranges WHERE queue_id = ?", (queue.queue_id,)
        )
    )
    kept = [r for r in rows if r.hi is not None]
    return len(kept), sum(1 for r in kept if r.reported_by is None)


# Ids named in one report; the ranges and the total stay exact.
MAX_IDS_SHOWN = 20


def describe(queue: str, ranges: Sequence[LostRange]) -> str:
    """One line naming the queue, the ranges with their (first) ids, and the causes."""
    total = sum(r.lost for r in ranges)
    shown: list[str] = []
    budget = MAX_IDS_SHOWN
    for r in ranges[:MAX_IDS_SHOWN]:
        ids = r.ids[: max(0, budget)]
        budget -= len(ids)
        named = ", ".join(str(i) for i in ids)
        more = r.lost - len(ids)
        rest = f"{' and ' if named else ''}{more} more" if more > 0 else ""
        shown.append(f"{r.lo}..{r.hi - 1} ({r.lost} lost: {named}{rest})")
    if len(ranges) > MAX_IDS_SHOWN:
        shown.append(f"and {len(ranges) - MAX_IDS_SHOWN} more ranges")
    causes = sorted({r.cause for r in ranges})
    return (
        f"queue {queue!r}: {total} message ids lost in {len(ranges)} "
        f"range{'' if len(ranges) == 1 else 's'}: "
        f"{'; '.join(shown)}. Cause: {' / '.join(causes)}"
    )
