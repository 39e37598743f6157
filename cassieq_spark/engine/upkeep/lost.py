"""Lost ranges: ids repair counted as lost, kept so that a streaming query can report them.

Repair counts the ids of a skipped range that never arrived (a writer died holding its
reservation) in the ``lost`` counter and in the range's row; that row goes with its bucket,
often in the very pass that counted it. So repair also keeps one ``lost_ranges`` row per range
with lost ids (which ids, up to :data:`MAX_IDS_KEPT`, and why), for the table's TTL (14
days); a purge keeps one for what it dropped. Nothing on the put or get path reads or writes
it; a streaming query reads the queue's partition once per trigger.

A report is keyed by the first id it names, so reports of the same range by a purge (ids that
were written) and by repair (ids that never were) stay apart. Repair writes its report
*before* the compare-and-set that marks the range done, as *pending* (``reported_by`` =
``pending:<the repair's token>``), and publishes it after: a repair killed or timed out
anywhere in between leaves a counted range with a pending report, which the next pass
publishes (:func:`publish_pending`) before anything of the range is forgotten. A counted
loss is always reported.

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
# `reported_by` of a report kept before the repair that wrote it marked its range done:
# not reported to anyone, and not to be until that repair (or the next pass) publishes it.
PENDING = "pending:"
RECORD_ATTEMPTS = 3
_READ_ONE = (
    "SELECT hi, lost, ids, cause, reported_by FROM {ks}.lost_ranges WHERE queue_id = ? AND lo = ?"
)
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
    pending: str | None = None,
) -> int | None:
    """Keep a range with lost (or purged) ids: ``ids`` name the first of them (their count is
    ``count``, by default ``len(ids)``), all in ``[lo, hi)``. Returns the key it is kept
    under; None when there was nothing to keep (or no key was left: logged as an error).

    The key is the first id named, not ``lo``: a purge names ids that were written and repair
    ids that never were, so a purge and a repair of the same range keep two reports, and
    neither takes over the other's ``reported_by``. Written only if no report has the key
    (a compare-and-set), so a retry finds its own row instead of writing over another's; in
    the rare case that another report has it, the next id named is the key.

    ``pending`` (repair's completion token) keeps the report from streaming queries until
    :func:`publish` (after the compare-and-set that makes that repair the one that counts the
    range); a repair that then loses drops it (:func:`drop_pending`), and one that dies in
    between leaves it to the next pass (:func:`publish_pending`).
    """
    if not ids:
        return None
    kept = list(ids[:MAX_IDS_KEPT])
    total = count or len(ids)
    marker = PENDING + pending if pending else None

    def ours(row) -> bool:
        if row is None or row.hi is None:
            return False
        if marker is not None:
            return row.reported_by == marker
        return (row.hi, row.lost, list(row.ids or ()), row.cause) == (hi, total, kept, cause)

    for key in kept:
        for _attempt in range(RECORD_ATTEMPTS):
            res = conn.cas(
                "INSERT INTO {ks}.lost_ranges (queue_id, lo, hi, lost, ids, cause, counted_at, "
                "reported_by) VALUES (?, ?, ?, ?, ?, ?, toTimestamp(now()), ?) IF NOT EXISTS",
                (queue.queue_id, key, hi, total, kept, cause, marker),
                read=_READ_ONE,
                read_params=(queue.queue_id, key),
                applied=ours,
            )
            row = res.one()
            if res.was_applied or ours(row):
                return key
            if row is None:
                continue  # the insert never ran (settled after a timeout): again
            if marker is None or not _pending_of_range(row, hi):
                break  # another report (or what is left of one) has this key: the next id
            # Another repair's report of this very range, not published: the repair
            # that marks the range done publishes its own, so take the row over.
            over = conn.cas(
                "UPDATE {ks}.lost_ranges SET hi = ?, lost = ?, ids = ?, cause = ?, "
                "counted_at = toTimestamp(now()), reported_by = ? "
                "WHERE queue_id = ? AND lo = ? IF reported_by = ?",
                (hi, total, kept, cause, marker, queue.queue_id, key, row.reported_by),
                read=_READ_ONE,
                read_params=(queue.queue_id, key),
                applied=ours,
            )
            if over.was_applied:
                return key
            # Changed meanwhile: look again.
        else:
            raise RuntimeError(
                f"queue {queue.name}: could not keep the report of lost ids {lo}..{hi - 1} "
                f"(id {key}) after {RECORD_ATTEMPTS} attempts; run repair (or purge) again"
            )
    log.error(
        "queue %s: every id named in lost range %d..%d already keys another report; the %d "
        "ids stay counted in stats' `lost`/`dropped`, but no streaming query will be told",
        queue.name,
        lo,
        hi - 1,
        total,
    )
    return None


def _pending_of_range(row, hi: int) -> bool:
    """Is ``row`` (kept under an id of the range ending at ``hi``) a pending report of it?"""
    pending = bool(row.reported_by and row.reported_by.startswith(PENDING))
    return pending and row.hi == hi


def publish(conn: Connection, queue: QueueInfo, key: int, pending: str) -> None:
    """Make the pending report kept under ``key`` visible to streaming queries."""
    marker = PENDING + pending
    conn.cas(
        "UPDATE {ks}.lost_ranges SET reported_by = null WHERE queue_id = ? AND lo = ? "
        "IF reported_by = ?",
        (queue.queue_id, key, marker),
        read=_READ_ONE,
        read_params=(queue.queue_id, key),
        applied=lambda row: row is None or row.reported_by != marker,
    )


def drop_pending(conn: Connection, queue: QueueInfo, key: int, pending: str) -> None:
    """Drop a pending report whose repair did not get to count its range."""
    marker = PENDING + pending
    conn.cas(
        "DELETE FROM {ks}.lost_ranges WHERE queue_id = ? AND lo = ? IF reported_by = ?",
        (queue.queue_id, key, marker),
        read=_READ_ONE,
        read_params=(queue.queue_id, key),
        applied=lambda row: row is None or row.reported_by != marker,
    )


def publish_pending(
    conn: Connection, queue: QueueInfo, done: Sequence[tuple[int, int, str]]
) -> int:
    """Settle the pending reports of ranges marked done, ``(lo, hi, done_by)`` each: publish
    the report of the repair that marked the range done (it died before it did), drop those
    of repairs that lost. Returns how many were published. Called by every repair pass
    before it forgets done ranges, so a counted loss is reported whatever repair died where.
    """
    if not done:
        return 0
    published = 0
    rows = conn.execute(
        "SELECT lo, hi, reported_by FROM {ks}.lost_ranges WHERE queue_id = ?", (queue.queue_id,)
    )
    for r in rows:
        if r.hi is None or not (r.reported_by and r.reported_by.startswith(PENDING)):
            continue
        token = r.reported_by[len(PENDING) :]
        for lo, hi, done_by in done:
            if lo <= r.lo < hi and r.hi == hi:
                if token == done_by:
                    publish(conn, queue, r.lo, token)
                    published += 1
                    log.warning(
                        "queue %s: the report of lost ids in %d..%d was not published by "
                        "the repair that counted them (it stopped, or is about to); "
                        "published now",
                        queue.name,
                        lo,
                        hi - 1,
                    )
                else:
                    drop_pending(conn, queue, r.lo, token)
                break
    return published


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
    kept = [
        r
        for r in rows
        if r.hi is not None and not (r.reported_by and r.reported_by.startswith(PENDING))
    ]
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
