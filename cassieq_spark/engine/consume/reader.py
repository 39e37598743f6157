"""The reader over a queue: one client's reader cache, the candidate scan, the claim and the
reader-pointer move. ``get`` (``consumer.py``) and ``get_many`` (``batch.py``) only say how many
messages they want and how to claim them (:class:`OneAtATime`, :class:`Batches`); ``peek``
(``peek.py``) asks what a get could return now, changing nothing.

The scan reads fresh messages from the reader pointer up to the horizon (never past an id that
may still be in flight), a stretch at a time, scan columns only. A row is a *candidate* when it
was never delivered, is visible, not acked, dead, expired, nor in a reservation handed to
repair. The reader pointer moves past every row that needs nothing more from the reader
(delivered once, delayed, handed to repair, or never written): those come back through timers
or repair, so the pointer never stalls behind them; it stops at the first candidate left
unclaimed. Under load the move is throttled (:data:`POINTER_MOVE_INTERVAL` per client); an
idle reader persists where it got to at once.

A group with messages waiting holds the pointer at its next one, and the stretch behind the
scan's frontier would be read again by every call. So a scan leaves what it read of it to the
next scan from the same place (``stretch_memory.py``): the grouped rows that were not finished;
that scan reads those groups' first rows where they may have changed, then the table from where
the last one stopped, its window (:data:`HORIZON_WINDOW`) counted from there.

A claim is a compare-and-set on the message rows (``IF version = ? AND acked = null AND
dead = null``): a single row (:meth:`Reader.claim`, one Paxos round per delivered message), or
one conditional batch of rows of one bucket partition (:meth:`Reader.claim_batch`: one Paxos
round, all or nothing, each row under the same condition). Either way two consumers can never
hold one message at once. The timers go first, so a claimer that dies right after its claim
still has the message come back. A claim that loses leaves the stretch stale: it is read
afresh, at most :data:`SCAN_ROUNDS` times per call, so a call's cost is bounded whatever the
backlog and however many consumers race.

After the claim, the fence: the lease check before the claim and the claim are two steps, so a
streaming query that took the lease in between gets what was claimed back
(:meth:`Reader.give_back`) and the call refuses with ``QueueBusyError``.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from cassandra.query import BatchStatement, BatchType

from ...errors import QueueBusyError
from ..core import clock, monoton, pointers, timers
from ..core.buckets import bucket_of, split_by_bucket
from ..core.clock import from_epoch, timer_slot, to_epoch
from ..core.messages import (
    COLUMNS,
    Message,
    is_done,
    is_expired,
    read_range,
    remaining_ttl,
    rows_per_read,
)
from ..core.queues import QueueInfo
from ..core.receipts import PopReceipt
from ..store import faults, suspend
from ..store.session import Connection
from ..stream.lease import stream_busy
from ..upkeep.ranges import record_skipped
from .groups import GroupHeads
from .stretch_memory import Recollection, StretchMemory, claimed_row, read_rows, remember
from .timer_path import CONTENDED_SECONDS, MAX_LOST_CLAIMS, ROW, SCAN_COLUMNS, TimerPath

log = logging.getLogger(__name__)

SCAN_FIRST_CHUNK = 32  # enough for a few racing consumers; grows over stretches handed off
# A call looks at most this far ahead of the reader for reservations, so its cost does not
# grow with the backlog.
HORIZON_WINDOW = 4096
SCAN_CHUNK = 1024  # rows of the reader path read at once, at most (scan columns only)
SCAN_ROUNDS = 4  # lost claims per call before giving up on the reader path
CANDIDATE_SPREAD = 8  # single claims pick among the first few candidates to race less
POINTER_MOVE_INTERVAL = 0.5  # seconds between reader-pointer moves by one client
# Rows claimed by one conditional batch (one Paxos round): a whole call's worth (of one bucket);
# after a lost race fewer (a batch that loses claims nothing), a quarter after each loss, down
# to CLAIM_MIN. A client that lost a race in the last CONTENDED_SECONDS reads a longer stretch
# and claims from a random place in it, so racing batches spread instead of colliding again.
CLAIM_MAX = 1000
CLAIM_MIN = 16

# Cells written after the insert carry what is left of the message's TTL.
# ``claimed_by`` names this claim, so that a read after a lost reply tells it from another
# consumer's claim of the same version (their due times may fall in the same millisecond).
_CLAIM = (
    "UPDATE {ks}.messages USING TTL ? "
    "SET version = ?, deliveries = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null"
)
# The batch claim: the single claim of a fresh row (version null), repeated.
_CLAIM_ROW = (
    "UPDATE {ks}.messages USING TTL ? "
    "SET version = 1, deliveries = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? "
    "IF version = null AND acked = null AND dead = null"
)
_SCAN_STRETCH = (
    f"SELECT {SCAN_COLUMNS} FROM {{ks}}.messages "
    "WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
)
_BODIES = (
    "SELECT id, payload, headers, enqueued_at FROM {ks}.messages "
    "WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
# The fence's give-back (see ``Reader.give_back``): as a change of visibility to "now" of
# the claim just made, with the delivery count put back.
_GIVE_BACK = (
    "UPDATE {ks}.messages USING TTL ? "
    "SET version = ?, deliveries = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ?"
)
# What the fault seam, the logs and the tests' counters see of a conditional batch.
_CLAIM_TEXT = f"BEGIN BATCH {_CLAIM_ROW}; ... APPLY BATCH"
_GIVE_BACK_TEXT = f"BEGIN BATCH {_GIVE_BACK}; ... APPLY BATCH"


@dataclass
class ReaderCache:
    """What one client knows of a queue's reader pointer between its (throttled) moves."""

    position: int = 0
    moved_at: float = 0.0
    # The last horizon and the skipped ranges read with it, one tuple so that a thread never
    # pairs one horizon with another read's ranges. Ids below ``horizon.safe_end`` stay safe
    # for good (new reservations only start at or above ``next_id``, closed ones never
    # reopen), so the horizon is re-read only when a scan reaches its end.
    view: tuple[monoton.Horizon, list[tuple[int, int]]] | None = None
    lost_race_at: float = 0.0
    # What the last scan read of the stretch behind its frontier (stretch_memory.py); replaced
    # whole by each scan, never changed in place.
    memory: StretchMemory | None = None
    # The first fresh ungrouped row the last scan left unclaimed: what the next get is likely
    # to claim (its timer may go out before the scan confirms it, see Reader.read_ahead).
    next_fresh: int | None = None


@dataclass
class Ahead:
    """What one get sent before reading the pointers (:meth:`Reader.read_ahead`): the first
    stretch of its scan, and the timer of the row it expects to claim."""

    lo: int = 0
    hi: int = 0
    stretch: object = None  # the future of the read of [lo, hi), scan columns
    timer_id: int | None = None
    timer_due: float = 0.0
    timer_futures: list = field(default_factory=list)
    marker_key: tuple | None = None  # the slot marker went with the timer


def outlived(now: float, vt: float) -> bool:
    """Whether a call that started at ``now`` (clock.now()) has outlived the visibility timeout
    ``vt`` of its claims: nothing it claims from here on could be handed out, so it claims
    nothing more (and a claim whose timer was stored only now sends no compare-and-set)."""
    return clock.now() >= now + vt


def is_candidate(row, skipped: list[tuple[int, int]], queue: QueueInfo, now: float) -> bool:
    """Whether the reader may claim ``row`` (scan columns) now: never delivered, visible, not
    acked, dead or expired, and not in a reservation handed to repair."""
    return not (
        row.acked
        or row.dead
        or row.version is not None
        or to_epoch(row.visible_at) > now
        or any(lo <= row.id < hi for lo, hi in skipped)
        or is_expired(row, queue, now)
    )


class ClaimRule(Protocol):
    """How a caller of :meth:`Reader.take` claims: how long a stretch to read, and how to
    claim from the candidates read."""

    def stretch(self, previous: int | None, want: int, contended: bool) -> int:
        """Rows to read next; ``previous`` is None for the first stretch and after a loss."""
        ...

    def claim(
        self, queue: QueueInfo, candidates: list, want: int, contended: bool, now: float, vt: float
    ) -> tuple[list[Message], bool]:
        """Up to ``want`` messages claimed from ``candidates`` (never empty, oldest first), each
        removed from the list, and whether a race was lost (the rest of the list is then
        stale). Raises ``QueueBusyError`` only if it claimed nothing; else it returns what it
        claimed and leaves the rest in the list."""
        ...


@dataclass
class OneAtATime:
    """``get``'s claims: one row at a time, the oldest first (FIFO for a lone consumer); racing
    consumers that lose it spread over the next few (:data:`CANDIDATE_SPREAD`) instead of all
    fighting for the same one, and a client that lost a race lately spreads even its first
    try. After :data:`MAX_LOST_CLAIMS` lost claims the stretch is read afresh rather than try
    each candidate read (each lost claim costs a Paxos round and leaves a timer behind). The
    stretch read doubles from :data:`SCAN_FIRST_CHUNK` over stretches with nothing to claim."""

    reader: Reader

    def stretch(self, previous: int | None, want: int, contended: bool) -> int:
        return SCAN_FIRST_CHUNK if previous is None else min(previous * 2, SCAN_CHUNK)

    def claim(
        self, queue: QueueInfo, candidates: list, want: int, contended: bool, now: float, vt: float
    ) -> tuple[list[Message], bool]:
        order = candidates[:CANDIDATE_SPREAD]
        if contended:
            random.shuffle(order)
        else:
            rest = order[1:]
            random.shuffle(rest)
            order = [order[0], *rest]
        lost = False
        for row in order[:MAX_LOST_CLAIMS]:
            msg = self.reader.claim(queue, row, now, vt)
            if msg is not None:
                candidates.remove(row)
                return [msg], lost
            lost = True
        return [], lost


@dataclass
class Batches:
    """``get_many``'s claims: one conditional batch per bucket partition of up to ``limit``
    rows, :data:`CLAIM_MAX` at first, a quarter after each lost race (down to
    :data:`CLAIM_MIN`). A client that lost a race lately reads a whole :data:`SCAN_CHUNK` and
    claims from a random place in it, so racing batches spread instead of colliding again."""

    reader: Reader
    limit: int = field(default=CLAIM_MAX)

    def stretch(self, previous: int | None, want: int, contended: bool) -> int:
        spread = SCAN_CHUNK if contended else 4 * want
        return min(SCAN_CHUNK, max(SCAN_FIRST_CHUNK, spread))

    def claim(
        self, queue: QueueInfo, candidates: list, want: int, contended: bool, now: float, vt: float
    ) -> tuple[list[Message], bool]:
        out: list[Message] = []
        while candidates and len(out) < want:
            n = min(want - len(out), self.limit)
            at = 0
            if contended and len(candidates) > n:
                at = random.randrange(len(candidates) - n + 1)
            bucket = bucket_of(candidates[at].id, queue.bucket_size)
            take = [
                r for r in candidates[at : at + n] if bucket_of(r.id, queue.bucket_size) == bucket
            ]
            try:
                won = self.reader.claim_batch(queue, take, now, vt)
            except QueueBusyError:
                if not out:
                    raise
                break  # a stream took the lease: keep what was claimed before, stop here
            if won is None:
                self.limit = max(CLAIM_MIN, min(self.limit, len(take)) // 4)
                return out, True
            out.extend(won)
            del candidates[at : at + len(take)]
        return out, False


class Reader:
    """One client's reader over its queues: a :class:`ReaderCache` per queue, the candidate
    scan, the claims (also the timer path's, :meth:`claim`) and the reader-pointer moves. The
    cache is a hint: the stored pointer only moves forward, and a claim, not the cache,
    decides who holds a message."""

    def __init__(self, conn: Connection, timer_path: TimerPath):
        self.conn = conn
        self.timers = timer_path
        self.caches: dict[uuid.UUID, ReaderCache] = {}
        self._marked: set = set()
        self.heads = GroupHeads(conn)
        self._ahead = suspend.CallLocal()  # the current call: queue_id -> Ahead

    # -- reads and writes sent ahead ----------------------------------------------------------

    def read_ahead(self, queue: QueueInfo, now: float, vt: float) -> None:
        """Send what a get will most likely need before it has read the pointers, so that it
        travels with that read (docs/internals/protocol.md, "Single calls in fewer round trips"):

        * the first stretch of the scan, from the position this client last moved the reader
          to. It is used only if the scan starts exactly there (no one moved the stored
          pointer past it meanwhile) and reads exactly that stretch; a row's state read a
          round trip earlier is no less final than one read after the pointers: every claim
          is a compare-and-set on the version read, and the lease is checked after the claim.
        * the timer of the row the last scan left as the next fresh one (ungrouped, and no
          race lost lately), for this call's due time. The claim of that row waits for the
          timer's reply before its compare-and-set, as for any claim (the timer goes first);
          if the call claims another row, or none, the timer is left behind as a lost claim's
          is: the timer path finds the row fresh (the reader path's), or held with a later
          due time, or finished."""
        cache = self.caches.get(queue.queue_id)
        if cache is None or cache.view is None or cache.memory is not None:
            return
        lo = cache.position
        hi = min(cache.view[0].safe_end, lo + SCAN_FIRST_CHUNK)
        parts = list(split_by_bucket(lo, hi, queue.bucket_size)) if lo < hi else []
        if len(parts) != 1:
            return
        bucket, _, _ = parts[0]
        ahead = Ahead(lo, hi)
        ahead.stretch = self.conn.execute_async(_SCAN_STRETCH, (queue.queue_id, bucket, lo, hi))
        fresh = cache.next_fresh
        if fresh is not None and lo <= fresh < hi and now - cache.lost_race_at >= CONTENDED_SECONDS:
            due = now + vt
            timers.before_write(queue, due, [fresh])
            timer, marker = timers.statements(self.conn, queue, due, fresh, now)
            ahead.timer_id, ahead.timer_due = fresh, due
            ahead.timer_futures = [self.conn.execute_async(timer)]
            key = (queue.queue_id, timer_slot(due))
            if key not in self._marked:
                ahead.timer_futures.append(self.conn.execute_async(marker))
                ahead.marker_key = key
        self._calls()[queue.queue_id] = ahead

    def drop_ahead(self, queue: QueueInfo) -> None:
        """End of the call: what it sent ahead and did not use is not used by a later call."""
        self._calls().pop(queue.queue_id, None)

    def _calls(self) -> dict:
        return self._ahead.get()

    def _stretch(self, queue: QueueInfo, lo: int, hi: int) -> list:
        """The scan columns of ``[lo, hi)``: the stretch read ahead if it is this one."""
        ahead = self._calls().get(queue.queue_id)
        if ahead is not None and ahead.stretch is not None:
            future, ahead.stretch = ahead.stretch, None
            if (ahead.lo, ahead.hi) == (lo, hi):
                try:
                    return list(future.result())
                except Exception:
                    pass  # read again below: the same read, after the pointers
        return list(read_range(self.conn, queue, lo, hi, SCAN_COLUMNS))

    def _timer_written(self, queue: QueueInfo, message_id: int, due: float) -> bool:
        """Did this call write the timer (and the slot marker it needs) of ``message_id`` for
        ``due`` ahead? Waits for those writes' replies: the timer must be stored before the
        claim is sent."""
        ahead = self._calls().get(queue.queue_id)
        if ahead is None or ahead.timer_id != message_id or ahead.timer_due != due:
            return False
        futures, ahead.timer_futures, ahead.timer_id = ahead.timer_futures, [], None
        try:
            for f in futures:
                f.result()
        except Exception:
            return False  # written again by the caller, after its own reply
        if ahead.marker_key is not None:
            self._marked.add(ahead.marker_key)
        return True

    # -- the scan -----------------------------------------------------------------------------

    def take(
        self,
        queue: QueueInfo,
        ptrs: pointers.Pointers,
        now: float,
        vt: float,
        want: int,
        rule: ClaimRule,
    ) -> list[Message]:
        """Up to ``want`` fresh messages from the reader pointer, claimed by ``rule``. Raises
        ``QueueBusyError`` (after giving back what it claimed) only if it returns nothing."""
        cache = self.caches.setdefault(queue.queue_id, ReaderCache())
        view = cache.view
        cached = view is not None and self._origin(cache, ptrs, now) < view[0].safe_end
        out = self._scan(queue, cache, ptrs, now, vt, want, rule, refresh=False)
        if len(out) < want and cached:
            # The cached horizon ran out: messages may have arrived beyond it.
            try:
                out += self._scan(queue, cache, ptrs, now, vt, want - len(out), rule, refresh=True)
            except QueueBusyError:
                if not out:
                    raise
        return out

    def _origin(self, cache: ReaderCache, ptrs: pointers.Pointers, now: float) -> int:
        """Where a scan reads its first row: the end of the stretch memory when it can be
        relied on, else the reader position."""
        start = max(cache.position, ptrs.reader)
        memory = cache.memory
        return memory.end if memory is not None and memory.usable(start, now) else start

    def _recall(self, queue: QueueInfo, memory: StretchMemory, now: float) -> Recollection:
        """The remembered stretch as it is now: each remembered group's first unfinished row,
        read again where it may have changed in a way that matters (stretch_memory.py)."""
        rec = Recollection(memory, lambda g: self.heads.finished_id(queue, g), queue, now)
        while True:
            groups, ids = rec.wants()
            if not groups and not ids:
                return rec
            if groups:
                heads = self.heads.read(queue, groups)
                rec.learn_heads({g: h.done for g, h in heads.items()}, groups)
            if ids:
                rec.learn_rows(read_rows(self.conn, queue, ids, SCAN_COLUMNS), ids)

    def _scan(
        self,
        queue: QueueInfo,
        cache: ReaderCache,
        ptrs: pointers.Pointers,
        now: float,
        vt: float,
        want: int,
        rule: ClaimRule,
        refresh: bool,
    ) -> list[Message]:
        start = max(cache.position, ptrs.reader)
        memory = cache.memory
        if memory is not None:
            memory = memory.rebased(start) if memory.usable(start, now) else None
        rec = self._recall(queue, memory, now) if memory is not None else None
        if rec is not None and rec.exhausted:
            rec = memory = None  # a cut group's next rows are not known: read the stretch
        origin = memory.end if memory is not None else start  # the first id read from the table
        view = cache.view
        if not refresh and view is not None and origin < view[0].safe_end:
            horizon, skipped = view
        else:
            horizon = monoton.horizon(self.conn, queue, origin, now, window=HORIZON_WINDOW)
            # From the scan's start, not its origin: after a lost race the call reads the
            # remembered stretch from the table too.
            skipped = (
                self.skipped_ranges(queue, start, horizon)
                if horizon.abandoned or start < horizon.safe_end
                else []
            )
            cache.view = (horizon, skipped)
        # Remembered rows after their group's first are not looked at: some may be fresh, and
        # the reader pointer must not pass them (even if the memory is dropped below).
        not_looked_at = rec.later_first() if rec is not None else None
        out: list[Message] = []
        at = start  # every id below this was read by this call (or needs nothing from it)
        hold: int | None = None  # the first fresh message left unclaimed: the pointer stops there
        gate = self.heads.gate(queue, now, skipped)
        lost = 0
        size: int | None = None
        # What the next scan from here may rely on (stretch_memory.py): the grouped rows read
        # and not finished, the rows this call claimed as it left them, and where the stretch
        # must end (before the first ungrouped message left unclaimed: nothing remembers it).
        seen: dict[str, list] = rec.remaining() if rec is not None else {}
        claimed_rows: dict[int, object] = {}
        unremembered: int | None = None
        forget = False  # this call saw something the memory cannot account for
        cuts = None  # the memory's cuts, kept through a lost race
        made = now  # when the stretch kept through a lost race was first read whole
        next_fresh: int | None = None  # the first fresh ungrouped row left after a claim
        end_of_reads = horizon.safe_end if memory is None else max(horizon.safe_end, memory.end)
        while (
            len(out) < want and at < end_of_reads and lost < SCAN_ROUNDS and not outlived(now, vt)
        ):
            contended = now - cache.lost_race_at < CONTENDED_SECONDS
            recalled = rec is not None and memory is not None and at == start
            if recalled:
                assert rec is not None and memory is not None
                rows = rec.firsts()  # the remembered stretch [start, memory.end), as it is now
                end = memory.end
            else:
                size = rule.stretch(size, want - len(out), contended)
                end = min(horizon.safe_end, at + size)
                if end <= at:
                    break
                rows = self._stretch(queue, at, end)
                for row in rows:
                    if row.grp is not None and not gate.settled(row):
                        seen.setdefault(row.grp, []).append(row)
            fresh = [row for row in rows if is_candidate(row, skipped, queue, now)]
            # Of a group, only its first unfinished row, and only once its head let go of it.
            candidates = gate.claimable(rows, fresh) if fresh else fresh
            if not candidates:
                if fresh and hold is None:
                    hold = fresh[0].id  # fresh, but its group is held: the pointer waits
                gate.passed(rows, end)
                at = end  # all handed off, held by their groups, or never written
                continue
            try:
                won, lost_now = rule.claim(queue, candidates, want - len(out), contended, now, vt)
            except QueueBusyError:
                cache.memory = None
                forget = True
                if not out:
                    raise
                hold = min(candidates[0].id, hold if hold is not None else candidates[0].id)
                break  # a stream took the lease: keep what was claimed before, stop here
            out.extend(won)
            claimed = {m.id for m in won}
            for row in fresh:
                if row.id in claimed:
                    claimed_rows[row.id] = claimed_row(row, now, vt)
            left = [row for row in fresh if row.id not in claimed]
            next_fresh = left[0].id if left and left[0].grp is None and not lost_now else None
            ungrouped = [row.id for row in left if row.grp is None]
            if ungrouped and unremembered is None:
                unremembered = ungrouped[0]
            if lost_now:
                cache.lost_race_at = now
                lost += 1
                size = None  # read the stretch afresh: the candidates read are stale
                again = candidates[0].id if candidates else end
                if left and left[0].id < again and hold is None:
                    hold = left[0].id  # a held group's message below the stretch read again
                gate.passed(rows, again)
                at = again
                # Lost to another consumer: the stretch from ``again`` on is read afresh from
                # the table. What this call knows below ``again`` stays true (a row it saw
                # finished stays finished; one remembered fresh or due is read again by the
                # next call anyway), so the memory keeps it, with the cuts and the age it had,
                # and takes the rows read from ``again`` on in place of the stale ones.
                cuts = memory.cut if memory is not None else cuts
                seen = {g: [r for r in rs if r.id < again] for g, rs in seen.items()}
                seen = {g: rs for g, rs in seen.items() if rs}
                made = memory.made_at if memory is not None else made
                rec = memory = None
                continue
            if left and hold is None:
                hold = left[0].id
            gate.passed(rows, end)
            at = end
            if candidates:
                break  # enough: the pointer cannot move past an unclaimed message anyway
        pos = at if hold is None else min(hold, at)
        if not_looked_at is not None:
            pos = min(pos, not_looked_at)
        self.move_reader(queue, cache, ptrs.reader, pos, now, force=not out)
        cache.next_fresh = next_fresh
        if forget:
            cache.memory = None
        else:
            end = at if memory is None else max(at, memory.end)
            if unremembered is not None:
                end = min(end, unremembered)
            made_at = memory.made_at if memory is not None else made
            cut = memory.cut if memory is not None else cuts
            cache.memory = remember(pos, end, made_at, seen, claimed_rows, cut)
        return out

    def skipped_ranges(
        self, queue: QueueInfo, from_id: int, horizon: monoton.Horizon
    ) -> list[tuple[int, int]]:
        """Reservations handed to repair that overlap the scan; newly abandoned ones are recorded
        *before* the reader pointer can move past them."""
        rows = self.conn.execute(
            "SELECT lo, hi FROM {ks}.skipped WHERE queue_id = ? AND lo >= ?",
            (queue.queue_id, max(0, from_id - monoton.MAX_BLOCK)),
        )
        known = {(r.lo, r.hi) for r in rows}
        for lo, hi in horizon.abandoned:
            if (lo, hi) not in known and record_skipped(self.conn, queue, lo, hi):
                known.add((lo, hi))
        return sorted(known)

    def move_reader(
        self, queue: QueueInfo, cache: ReaderCache, stored: int, to: int, now: float, force: bool
    ) -> None:
        """The cached position to ``to``; the stored pointer too, at most every
        :data:`POINTER_MOVE_INTERVAL` unless ``force``."""
        cache.position = max(cache.position, to)
        if to > stored and (force or now - cache.moved_at >= POINTER_MOVE_INTERVAL):
            cache.moved_at = now
            pointers.advance(self.conn, queue, "reader", to)

    def peek(self, queue: QueueInfo, limit: int) -> list[Message]:
        """Up to ``limit`` messages that a get could return now (fresh ones and due
        redeliveries, from the repair pointer up to the horizon), without changing anything:
        no claim, no pointer move, no cache."""
        now = clock.now()
        ptrs = pointers.read(self.conn, queue)
        hz = monoton.horizon(self.conn, queue, ptrs.reader, now)
        out: list[Message] = []
        first = ptrs.repair * queue.bucket_size
        for row in read_range(self.conn, queue, first, hz.safe_end, COLUMNS):
            if is_done(row, ptrs.reader) or is_expired(row, queue, now):
                continue
            if max(to_epoch(row.visible_at), to_epoch(row.invisible_until)) > now:
                continue
            out.append(
                Message(
                    row.id,
                    row.payload or b"",
                    dict(row.headers or {}),
                    None,
                    row.deliveries or 0,
                    row.enqueued_at,
                )
            )
            if len(out) >= limit:
                break
        return out

    # -- claims -------------------------------------------------------------------------------

    def claim(self, queue: QueueInfo, row, now: float, vt: float) -> Message | None:
        """Claim ``row`` (scan columns; fresh or a due redelivery) for ``vt`` seconds with one
        compare-and-set; None if another consumer has it (or its TTL ran out meanwhile)."""
        if outlived(now, vt):
            return None
        version = (row.version or 0) + 1
        deliveries = (row.deliveries or 0) + 1
        due = now + vt
        # The timer goes first: if we die right after the claim, the message still comes back.
        # So does a fresh grouped message's head (groups.py): whoever passes it finds it named.
        try:
            if not self._timer_written(queue, row.id, due):
                self._schedule(queue, due, row.id, now)
            self.heads.write_heads(queue, [row])
        except Exception as exc:
            self._not_claimed(queue, [row.id], exc)
            return None
        if outlived(now, vt):
            # The timer may lie in a slot every timer path has passed (timers.in_time holds
            # for it only before now + vt): no claim relies on it. The row stays as it was,
            # and the timer is a lost claim's (the timer path finds the row as it is).
            return None
        key = (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id)
        # The body is read alongside the claim (one round trip less); wasted only on a lost race.
        body_future = self.conn.execute_async(ROW.format(cols="payload, headers, enqueued_at"), key)
        faults.point("consumer.before_claim", queue=queue, row=row, now=now)
        token = uuid.uuid4().hex[:16]
        res = self.conn.cas(
            _CLAIM,
            (
                remaining_ttl(row, queue, now),
                version,
                deliveries,
                from_epoch(due),
                token,
                *key,
                row.version,
            ),
            read=ROW.format(cols="version, claimed_by"),
            read_params=key,
            applied=lambda cur: (
                cur is not None and cur.version == version and cur.claimed_by == token
            ),
        )
        body = body_future.result().one()
        if not res.was_applied:
            return None
        self._fence(queue, [row], version, "get")
        self.timers.delivered(queue, row.id, version, due)
        if body is None or body.enqueued_at is None:
            return None  # its TTL ran out meanwhile: the claim's cells expire with it
        return Message(
            id=row.id,
            payload=body.payload or b"",
            headers=dict(body.headers or {}),
            pop_receipt=PopReceipt.issue(queue, row.id, version),
            delivery_count=deliveries,
            enqueued_at=body.enqueued_at,
        )

    def claim_batch(
        self, queue: QueueInfo, rows: list, now: float, vt: float
    ) -> list[Message] | None:
        """Claim ``rows`` (fresh, one bucket) with one conditional batch; None if it lost.

        After a lost reply (``Connection.cas``) the first row is read back at SERIAL: its
        ``claimed_by`` token says whether this batch applied, and then it applied to every
        row."""
        if outlived(now, vt):
            return None
        conn = self.conn
        due = now + vt
        bucket = bucket_of(rows[0].id, queue.bucket_size)
        ids = [r.id for r in rows]
        # The timers go first: if we die right after the claim, the messages still come back.
        # So do the heads of grouped messages (groups.py): whoever passes them finds them named.
        try:
            self._schedule_many(queue, due, ids, now)
            self.heads.write_heads(queue, rows)
        except Exception as exc:
            self._not_claimed(queue, ids, exc)
            return None
        if outlived(now, vt):
            return None  # the timers may have been passed already: as in claim()
        # The first bodies are read alongside the claim (one round trip less; wasted only on a
        # lost race), the rest after it, one read at a time: no reply and no moment holds more
        # than messages.BODY_BUDGET_BYTES of the queue's largest messages, whatever the batch
        # size.
        per_read = rows_per_read(queue)
        chunks = [ids[i : i + per_read] for i in range(0, len(ids), per_read)]
        first_bodies = conn.execute_async(_BODIES, (queue.queue_id, bucket, chunks[0]))
        faults.point("batch.before_claim", queue=queue, rows=rows, now=now)
        token = uuid.uuid4().hex[:16]
        params = [
            (
                remaining_ttl(r, queue, now),
                (r.deliveries or 0) + 1,
                from_epoch(due),
                token,
                queue.queue_id,
                bucket,
                r.id,
            )
            for r in rows
        ]
        first = (queue.queue_id, bucket, rows[0].id)
        res = conn.cas(
            self._batch(_CLAIM_ROW, _CLAIM_TEXT, params),
            (),
            read=ROW.format(cols="version, claimed_by"),
            read_params=first,
            applied=lambda cur: cur is not None and cur.version == 1 and cur.claimed_by == token,
        )
        found = {b.id: b for b in first_bodies.result()}
        if not res.was_applied:
            return None
        for chunk in chunks[1:]:
            found.update((b.id, b) for b in conn.execute(_BODIES, (queue.queue_id, bucket, chunk)))
        self._fence(queue, rows, 1, "get_many")
        out = []
        for r in rows:
            self.timers.delivered(queue, r.id, 1, due)
            body = found.get(r.id)
            if body is None or body.enqueued_at is None:
                continue  # its TTL ran out meanwhile: the claim's cells expire with it
            out.append(
                Message(
                    id=r.id,
                    payload=body.payload or b"",
                    headers=dict(body.headers or {}),
                    pop_receipt=PopReceipt.issue(queue, r.id, 1),
                    delivery_count=(r.deliveries or 0) + 1,
                    enqueued_at=body.enqueued_at,
                )
            )
        return out

    def _not_claimed(self, queue: QueueInfo, ids: list[int], exc: Exception) -> None:
        """A write that goes before a claim (its timer, a group's head) failed: the claim is
        not sent, as after a lost race, and what the call claimed before stays its caller's.
        Raising instead would take those from the caller, each delivery counted and seen by
        nobody. A write that applied anyway leaves a stray timer (the timer path finds the
        row as it is) or a head naming a fresh message (which blocks nothing)."""
        log.warning(
            "queue %s: a write before the claim of message %d (and %d more) failed (%s); "
            "not claimed",
            queue.name,
            ids[0],
            len(ids) - 1,
            exc,
        )

    def _batch(self, statement: str, text: str, params: list[tuple]) -> BatchStatement:
        """One conditional batch of the prepared single-row ``statement``, repeated: a single
        prepared statement whatever the batch size (a text batch per size would fill the
        server's cache of prepared statements with up to 1,000 variants)."""
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        stmt = self.conn.prepare(statement)
        for p in params:
            batch.add(stmt, p)
        batch.query_string = text
        return batch

    def _fence(self, queue: QueueInfo, rows: list, version: int, call: str) -> None:
        """The lease check before the claim and the claim are two steps: a streaming query
        that took the lease in between may have planned these messages. Look again after the
        claim; if a stream holds the lease, give the messages back to it (:meth:`give_back`)
        and refuse, so that none is ever in flight with the client and the stream at once.

        A stream that takes the lease after this read sees the messages claimed: deliveries
        due after the visibility timeout, which its timer path delivers then."""
        now = clock.now()
        busy = stream_busy(queue, pointers.read(self.conn, queue), now)
        if busy is None:
            return
        self.give_back(queue, rows, version, now)
        log.warning(
            "queue %s: a streaming query took the lease during this %s; %d message(s) given back "
            "(first id %d)",
            queue.name,
            call,
            len(rows),
            rows[0].id,
        )
        raise busy

    def give_back(self, queue: QueueInfo, rows: list, version: int, now: float) -> None:
        """See :meth:`give_back_once`; a give-back whose compare-and-set's reply came after
        the deadline of its due time (``timers.in_time``) may have landed after a stream's
        timer window passed it, and is made again (version one higher, a new timer), at most
        ``timers.LATE_REDOS`` times."""
        for _ in range(timers.LATE_REDOS):
            due = self.give_back_once(queue, rows, version, now)
            if due is None or timers.in_time(due):
                return
            log.warning(
                "queue %s: a give-back reached Cassandra too late to be read by every timer "
                "path; made again",
                queue.name,
            )
            version, now = version + 1, clock.now()

    def give_back_once(
        self, queue: QueueInfo, rows: list, version: int, now: float
    ) -> float | None:
        """Hand ``rows`` (scanned rows of one bucket, each just claimed at ``version`` by this
        client, whose receipts nobody has seen) to the stream that took the lease: each
        becomes a redelivery due ``now``, with a timer in ``slot(now)`` and its delivery count
        as before the claim (nobody got the message).

        Never back to its state before the claim: the stream may have read the row while it
        was claimed (not due, so not delivered), and its ack then counts a fresh row below
        its reader pointer as consumed, or, for a redelivery, finds its old due time before
        its timer window: the message would be acked unread or stranded. A due redelivery
        written now is found by the stream's timer path in a later batch, and no ack passes
        it unread: the ack takes only rows whose state was written before the batch's time.
        If the stream read the row before the claim, it delivers it again (at least once).

        The timers go first (a crash right after the change still brings the messages back),
        stored where every timer path reads them (``timers.store``: a late write is made
        again, due a little later).
        The rows of one bucket are changed by one conditional batch (one Paxos round); if it
        does not apply (a row changed meanwhile, e.g. its TTL ran out), one compare-and-set
        each. A row that cannot be given back stays claimed and comes back when its
        visibility timeout ends. Returns the earliest due time written (None: no rows)."""
        if not rows:
            return None
        bucket = bucket_of(rows[0].id, queue.bucket_size)
        now, due = timers.store(self.conn, queue, [(0.0, r.id) for r in rows], now)
        token = uuid.uuid4().hex[:16]
        keys = [(queue.queue_id, bucket, r.id) for r in rows]
        params = [
            (remaining_ttl(r, queue, now), version + 1, r.deliveries, from_epoch(d), token)
            + key
            + (version,)
            for r, key, d in zip(rows, keys, due, strict=True)
        ]

        def given_back(cur) -> bool:
            return cur is not None and cur.version == version + 1 and cur.claimed_by == token

        read = ROW.format(cols="version, claimed_by")
        if len(rows) > 1:
            batch = self._batch(_GIVE_BACK, _GIVE_BACK_TEXT, params)
            res = self.conn.cas(batch, (), read=read, read_params=keys[0], applied=given_back)
            if res.was_applied:
                return min(due)
        for p, key in zip(params, keys, strict=True):
            self.conn.cas(_GIVE_BACK, p, read=read, read_params=key, applied=given_back)
        return min(due)

    def _schedule(self, queue: QueueInfo, due: float, message_id: int, now: float) -> None:
        """Write the timer; the slot's "not empty" marker only once per slot and client (the
        marker is the same row every time, and deliveries fill a slot with many timers)."""
        timers.before_write(queue, due, [message_id])
        timer, marker = timers.statements(self.conn, queue, due, message_id, now)
        key = (queue.queue_id, timer_slot(due))
        futures = [self.conn.execute_async(timer)]
        if key not in self._marked:
            futures.append(self.conn.execute_async(marker))
        for f in futures:
            f.result()
        if len(self._marked) > 4096:
            self._marked.clear()
        self._marked.add(key)

    def _schedule_many(self, queue: QueueInfo, due: float, ids: list[int], now: float) -> None:
        """The timers of one batch claim: one unlogged batch on the slot's partition, and its
        marker."""
        timers.before_write(queue, due, ids)
        stmts = timers.many_statements(self.conn, queue, [(due, mid) for mid in ids], now)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for s in stmts[:-1]:
            batch.add(s)
        futures = [self.conn.execute_async(batch), self.conn.execute_async(stmts[-1])]
        for f in futures:
            f.result()
