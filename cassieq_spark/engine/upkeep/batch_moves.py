"""Redrive and move in batches: receive many, one keyed write per batch, ack many.

One batch costs a batch receive (a conditional batch per bucket), one small write per message
(its mark) and a few per batch (its manifest), all in flight at once, one keyed write of the
whole batch (one reservation, whatever its size) and a batch ack, instead of a claim, a keyed
write and an ack for every message (``moves.move_messages``, kept for comparison and for
callers that want it).

**Each message lands in the destination once, across crashes and concurrent movers.** A
batch (its messages in ascending id order) is planned before anything of it is written to the
destination, in the destination's ``reservation_keys``:

1. the *manifest*, under a random 62-bit batch number ``n``: the batch's ids as runs of
   consecutive ids, one row ``movebatch:<source>:<n>:<j>`` -> (first, last + 1) a run, and a
   row ``movebatch:<source>:<n>:size`` -> (runs, messages);
2. then a *mark* per message, ``movedby:<source>:<id>`` -> (``n``, position): written only once
   the whole manifest is, so a mark always names a complete manifest. A mark is written with
   the time its mover received the message as its write time: of two movers that planned one
   message, the later claim's mark stands, whatever order the writes land in;
3. then, if the plan was made while the batch's claims held (within its visibility timeout,
   less a margin), the batch is written to the destination under the key
   ``movebatch:<source>:<n>`` (``producer.enqueue``: a repeated call with the same rows writes
   into the same ids and enqueues nothing twice) and the source messages are acked. A plan
   made too late is given up: another mover may hold its messages and have planned them.

A mover that receives a redelivered message with a mark (a message received for the first
time cannot have been planned) does not plan it again: it repeats the marked batch's keyed
write, with the rows rebuilt from the manifest and the source rows (a repeat finds the batch
closed and writes nothing, or finishes what a dead mover left open, into the same ids), then
acks the message. A batch is repeated only while every one of its ids is still marked for
it: a batch given up whose messages another mover planned since is never written. So a mover
that dies anywhere, and a slow mover whose claims ran out while another took its messages
over, cause no second copy: every path to the destination goes through the key of the batch
whose marks stand. An ack that comes back stale means another mover acked the message since
(``taken_over``), its copy the same one. A redelivery that the one-at-a-time path began (its
key ``move:<source>:<id>`` is there) is finished under that key, as that path would.

Marks and manifests live in the destination's ``reservation_keys`` with the table's TTL (14
days), like the keys of the one-at-a-time path: a rerun to another destination does not see
them. Cost of a replay (after a crash only): a read per manifest row, per mark of the batch and
per source row.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...errors import ConfigError
from ..consume import batch as batch_receive
from ..consume import batch_ack
from ..core import clock
from ..core.buckets import bucket_of
from ..core.counters import Counters
from ..core.messages import Message
from ..core.progress import ProgressSink, start_task
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from ..write.producer import enqueue
from .moves import MoveReport, finish_move, move_key, moved_headers, refused_move

log = logging.getLogger(__name__)

DEFAULT_BATCH = 1000
# A batch is written only if it was planned within this share of its visibility timeout
# short of the whole: the margin covers the difference between the claim's clock and ours.
CLAIM_MARGIN = 0.1
MAX_BATCH = 1000  # get_many and ack_many take at most this many

__all__ = [
    "DEFAULT_BATCH",
    "MAX_BATCH",
    "Pacer",
    "batch_key",
    "move_in_batches",
    "remaining_estimate",
    "replay_marked",
    "runs",
]

_SELECT = "SELECT lo, hi FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?"
_INSERT = "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?)"
# Marks carry the time their mover received the message: of two movers that planned one
# message, the later claim's mark wins, whatever order the writes arrive in.
_MARK = (
    "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?) "
    "USING TIMESTAMP ?"
)


def remaining_estimate(totals: dict[str, int]) -> int:
    """Messages a queue holds by its counters (enqueued less those that left it): a total for
    progress, not a count to rely on (the counters are updated after the rows)."""
    left = totals.get("acked", 0) + totals.get("dead_lettered", 0) + totals.get("dropped", 0)
    return max(0, totals.get("enqueued", 0) + totals.get("republished", 0) - left)


def batch_key(source: QueueInfo, number: int) -> str:
    """The destination's reservation key of one planned batch's keyed write."""
    return f"movebatch:{source.queue_id}:{number}"


def _manifest_key(source: QueueInfo, number: int, row: int | str) -> str:
    return f"movebatch:{source.queue_id}:{number}:{row}"


def _mark_key(source: QueueInfo, message_id: int) -> str:
    return f"movedby:{source.queue_id}:{message_id}"


class Pacer:
    """At most ``rate`` units per second on average since the start (None: no limit); a
    batch is cut to a second's worth so the pace stays even."""

    def __init__(self, rate: float | None, sleep: Callable[[float], None] = time.sleep):
        if rate is not None and not rate > 0:
            raise ConfigError(
                f"rate must be a positive number of messages per second, got {rate!r}"
            )
        self.rate = rate
        self._sleep = sleep
        self._started = time.monotonic()

    def cap(self, want: int) -> int:
        return want if self.rate is None else max(1, min(want, int(self.rate)))

    def wait(self, done: int) -> None:
        """Sleep until ``done`` units are within the rate."""
        if self.rate is None:
            return
        ahead = self._started + done / self.rate - time.monotonic()
        if ahead > 0:
            self._sleep(ahead)


@dataclass(frozen=True)
class _Mark:
    number: int
    position: int


def _read_marks(
    conn: Connection, destination: QueueInfo, source: QueueInfo, ids: Sequence[int]
) -> dict[int, _Mark]:
    stmt = conn.prepare(_SELECT)
    futures = [
        (mid, conn.execute_async(stmt, (destination.queue_id, _mark_key(source, mid))))
        for mid in ids
    ]
    marks: dict[int, _Mark] = {}
    for mid, f in futures:
        row = f.result().one()
        if row is not None:
            marks[mid] = _Mark(int(row.lo), int(row.hi))
    return marks


def _single_copies(
    conn: Connection, destination: QueueInfo, source: QueueInfo, ids: Sequence[int]
) -> set[int]:
    """Those of ``ids`` that the one-at-a-time path wrote (or began to) under its own key."""
    stmt = conn.prepare(_SELECT)
    futures = [
        (mid, conn.execute_async(stmt, (destination.queue_id, f"{move_key(source, mid)}#0")))
        for mid in ids
    ]
    return {mid for mid, f in futures if f.result().one() is not None}


def replay_marked(
    conn: Connection,
    counters: Counters,
    source: QueueInfo,
    destination: QueueInfo,
    message_id: int,
    redrive: bool,
) -> bool:
    """For the one-at-a-time path: if a batch mover planned this message, repeat that batch's
    write (its copy is then in the destination) and return True."""
    mark = _read_marks(conn, destination, source, [message_id]).get(message_id)
    return mark is not None and _replay(conn, counters, source, destination, mark.number, redrive)


def _wait_all(futures: list) -> None:
    for f in futures:
        f.result()


def runs(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending ``ids`` as runs of consecutive ids, ``(first, last + 1)`` each."""
    out: list[tuple[int, int]] = []
    for mid in ids:
        if out and out[-1][1] == mid:
            out[-1] = (out[-1][0], mid + 1)
        else:
            out.append((mid, mid + 1))
    return out


def _plan(
    conn: Connection,
    destination: QueueInfo,
    source: QueueInfo,
    ids: Sequence[int],
    received_at: float,
) -> int:
    """Write the manifest, then the marks, of a new batch of ascending ``ids`` received at
    ``received_at`` (epoch seconds); returns its number. The manifest holds the ids as runs
    of consecutive ids (a batch of fresh messages is mostly one run) and, in its row
    ``size``, the number of runs and of messages."""
    number = secrets.randbits(62)
    stmt = conn.prepare(_INSERT)
    mark = conn.prepare(_MARK)
    stamp = int(received_at * 1_000_000)
    spans = runs(ids)
    rows = [(_manifest_key(source, number, j), lo, hi) for j, (lo, hi) in enumerate(spans)]
    rows.append((_manifest_key(source, number, "size"), len(spans), len(ids)))
    _wait_all(
        [conn.execute_async(stmt, (destination.queue_id, key, lo, hi)) for key, lo, hi in rows]
    )
    faults.point("move.planned", source=source, number=number, ids=list(ids))
    _wait_all(
        [
            conn.execute_async(
                mark, (destination.queue_id, _mark_key(source, mid), number, i, stamp)
            )
            for i, mid in enumerate(ids)
        ]
    )
    return number


def _manifest(
    conn: Connection, destination: QueueInfo, source: QueueInfo, number: int
) -> list[int] | None:
    """The source ids of batch ``number`` in order; None when its manifest is gone (its TTL
    ran out: its marks went with it)."""
    stmt = conn.prepare(_SELECT)
    size = conn.execute(stmt, (destination.queue_id, _manifest_key(source, number, "size"))).one()
    if size is None:
        return None
    futures = [
        conn.execute_async(stmt, (destination.queue_id, _manifest_key(source, number, j)))
        for j in range(int(size.lo))
    ]
    ids: list[int] = []
    for f in futures:
        row = f.result().one()
        if row is None:
            return None
        ids.extend(range(int(row.lo), int(row.hi)))
    return ids if len(ids) == int(size.hi) else None


def _write(
    conn: Connection,
    counters: Counters,
    source: QueueInfo,
    destination: QueueInfo,
    number: int,
    payloads: list[bytes],
    headers: list[dict[str, str]],
) -> None:
    enqueue(conn, counters, destination, payloads, headers, key=batch_key(source, number))


def _replay(
    conn: Connection,
    counters: Counters,
    source: QueueInfo,
    destination: QueueInfo,
    number: int,
    redrive: bool,
) -> bool:
    """Repeat batch ``number``'s keyed write with the rows it was planned with. False when
    its manifest is gone."""
    ids = _manifest(conn, destination, source, number)
    if ids is None:
        return False
    marks = _read_marks(conn, destination, source, ids)
    if any(marks.get(mid) != _Mark(number, i) for i, mid in enumerate(ids)):
        # A batch whose planner gave it up (its claims ran out before its marks were
        # written) and some of whose messages another mover planned since: never written,
        # and never to be (no replay finds all its marks); its messages are planned afresh.
        return False
    futures = [
        conn.execute_async(
            "SELECT payload, headers FROM {ks}.messages WHERE queue_id = ? AND bucket = ? "
            "AND id = ?",
            (source.queue_id, bucket_of(mid, source.bucket_size), mid),
        )
        for mid in ids
    ]
    payloads: list[bytes] = []
    headers: list[dict[str, str]] = []
    for mid, f in zip(ids, futures, strict=True):
        row = f.result().one()
        if row is None:
            # Only a batch the destination has closed can lose a source row (every message
            # of it acked, its bucket reclaimed): the keyed write then writes nothing.
            log.warning(
                "move batch %d: source message %d of %s is gone; replaying with an empty row",
                number,
                mid,
                source.name,
            )
        payloads.append(bytes(row.payload or b"") if row is not None else b"")
        headers.append(
            moved_headers(dict(row.headers or {}) if row is not None else {}, source, redrive)
        )
    _write(conn, counters, source, destination, number, payloads, headers)
    return True


def move_in_batches(
    conn: Connection,
    counters: Counters,
    consumer,
    source: QueueInfo,
    destination: QueueInfo,
    *,
    max_messages: int | None,
    visibility_timeout: float,
    redrive: bool,
    batch_size: int = DEFAULT_BATCH,
    rate: float | None = None,
    progress: ProgressSink | None = None,
    should_stop: Callable[[], bool] | None = None,
    total_hint: int | None = None,
) -> MoveReport:
    """Move up to ``max_messages`` (all visible ones if None) from ``source`` to
    ``destination``, ``batch_size`` at a time (1 to 1,000), at most ``rate`` messages per
    second (None: as fast as it goes), each exactly once (see the module's docstring).
    ``should_stop`` is asked between batches; a batch once received is finished. A message
    larger than the destination accepts is given back (visible again, its delivery not
    counted) after the rest of its batch moved, and refused with ``ConfigError``."""
    if source.queue_id == destination.queue_id:
        raise ConfigError(f"cannot move queue {source.name!r} onto itself: choose another --to")
    if (
        not isinstance(batch_size, int)
        or isinstance(batch_size, bool)
        or not 1 <= batch_size <= MAX_BATCH
    ):
        raise ConfigError(f"batch size must be 1 to {MAX_BATCH}, got {batch_size!r}")
    pacer = Pacer(rate)
    report = MoveReport(source.name, destination.name)
    total = max_messages if max_messages is not None else total_hint
    task = start_task(
        progress, "redrive" if redrive else "move", f"{source.name} -> {destination.name}", total
    )

    def handled() -> int:
        return report.moved + report.taken_over

    while max_messages is None or handled() < max_messages:
        if should_stop is not None and should_stop():
            break
        want = batch_size if max_messages is None else min(batch_size, max_messages - handled())
        want = pacer.cap(want)
        pacer.wait(handled())
        received_at, since = clock.now(), time.monotonic()
        got: list[Message] = batch_receive.get_many(consumer, source, visibility_timeout, want, 0.0)
        if not got:
            break
        fitting = [m for m in got if len(m.payload) <= destination.max_payload_bytes]
        refused = [m for m in got if len(m.payload) > destination.max_payload_bytes]
        if fitting:
            # Only a redelivery can have been planned: a mover plans what it received.
            again = [m.id for m in fitting if m.delivery_count > 1]
            marks = _read_marks(conn, destination, source, again) if again else {}
            replayed: set[int] = set()
            for number in sorted({mk.number for mk in marks.values()}):
                if _replay(conn, counters, source, destination, number, redrive):
                    replayed.add(number)
            unplanned = [
                m for m in fitting if m.id not in marks or marks[m.id].number not in replayed
            ]
            # A redelivery the one-at-a-time path began: finished under its key, as it would.
            singles = _single_copies(
                conn, destination, source, [m.id for m in unplanned if m.delivery_count > 1]
            )
            for m in unplanned:
                if m.id in singles:
                    enqueue(
                        conn,
                        counters,
                        destination,
                        [m.payload],
                        [moved_headers(dict(m.headers), source, redrive)],
                        key=move_key(source, m.id),
                    )
            fresh = sorted((m for m in unplanned if m.id not in singles), key=lambda m: m.id)
            if fresh:
                number = _plan(conn, destination, source, [m.id for m in fresh], received_at)
                if time.monotonic() - since > visibility_timeout * (1 - CLAIM_MARGIN):
                    # Our claims may have run out before the marks were written: another
                    # mover may hold these messages and have planned them. This batch is
                    # never written; its messages come back when their claims end.
                    log.warning(
                        "move %s -> %s: a batch of %d took longer than its visibility timeout "
                        "(%gs) to plan; left for the next pass",
                        source.name,
                        destination.name,
                        len(fresh),
                        visibility_timeout,
                    )
                    continue
                _write(
                    conn,
                    counters,
                    source,
                    destination,
                    number,
                    [m.payload for m in fresh],
                    [moved_headers(dict(m.headers), source, redrive) for m in fresh],
                )
            faults.point("move.written", source=source, message=fitting[0], messages=fitting)
            results = batch_ack.ack_many(consumer, source, [m.pop_receipt or "" for m in fitting])
            ok = sum(1 for r in results if r.ok)
            report.moved += ok
            report.taken_over += len(results) - ok
            task.advance(len(results), moved=ok, taken_over=len(results) - ok)
        if refused:
            back = [consumer.return_unused(source, m) for m in refused]
            task.finish(moved=report.moved, taken_over=report.taken_over)
            raise refused_move(
                source, destination, refused[0], given_back=back[0], moved=report.moved
            )
    return finish_move(task, report, redrive=redrive, how="in batches", logger=log)
