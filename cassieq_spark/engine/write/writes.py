"""Writing rows into reserved blocks so that what a writer reports as written gets delivered.

A writer reserves a block of ids (under a key when a retry must find it again), writes its rows
and closes the block. Three things could make it report success for rows no one delivers:

* Readers handed the block to repair (it stayed open longer than the repair timeout) before
  or while we wrote; once repair has finished the range, rows landing there are never
  delivered. Whenever we write into such a block, or our close loses to the
  skip, we first push back the repair of its range (:func:`restart_repair_clock`), so repair
  waits again and then republishes what we wrote. If the range is already repaired, the rows
  repair did not deliver move on to a new block (:func:`undelivered`); also once repair
  reclaimed the bucket and forgot the range, whose keyed reservation stays as a marker for
  this (a missing row would read as "written"). Closing and rolling back live in
  ``settle.py``.
* Two attempts of one keyed write share its block (speculation, a zombie task). Only the
  attempt that reserved a block may roll it back, and its rollback and the other attempt's
  close are compare-and-sets on the block's reservation row (``released``): exactly one wins,
  so a rollback never destroys rows another attempt reported written.
* A keyed replay whose rows differ from the first attempt's (another partition layout, a
  non-deterministic input). Next to each key we record the fingerprint and count of its
  rows (:func:`content_key`); a replay honours a key only for the same rows, and otherwise
  fails closed (:class:`~cassieq_spark.errors.ReplayMismatchError`) or, if the caller allows
  it, writes its rows under a key of their own.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import ContentionError, ReplayMismatchError
from ..core import monoton
from ..core.messages import Pipeline, write_messages
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from .settle import Block, finish_rollback, key_names, restart_repair_clock, undelivered

log = logging.getLogger(__name__)

# How many times one set of rows may move on to a new block (a block repaired before we wrote,
# an attempt that rolled back the block we shared): each needs another race lost.
MAX_HOPS = 8


def content_key(key: str) -> str:
    """Where the fingerprint (``lo``) and row count (``hi``) of a key's rows are kept."""
    return f"{key}!rows"


# -- the rows of one block --------------------------------------------------------------------


@dataclass
class Rows:
    """Payloads (already checked) with their optional headers and delays, in id order."""

    payloads: Sequence[bytes]
    headers: Sequence[dict[str, str] | None] | None = None
    delays: Sequence[float] | None = None

    def __len__(self) -> int:
        return len(self.payloads)

    def subset(self, offsets: Sequence[int]) -> Rows:
        return Rows(
            [self.payloads[i] for i in offsets],
            None if self.headers is None else [self.headers[i] for i in offsets],
            None if self.delays is None else [self.delays[i] for i in offsets],
        )

    def fingerprint(self) -> int:
        """A 64-bit hash of the rows, the same for the same rows whatever their origin: absent
        headers or delays hash like all-empty ones."""
        h = hashlib.blake2b(digest_size=8)
        h.update(array("q", map(len, self.payloads)).tobytes())
        h.update(b"".join(self.payloads))
        if self.headers is not None and any(self.headers):
            canon = [sorted(x.items()) if x else None for x in self.headers]
            h.update(json.dumps(canon, separators=(",", ":")).encode("utf-8"))
        if self.delays is not None and any(self.delays):
            h.update(array("d", self.delays).tobytes())
        return struct.unpack(">q", h.digest())[0]


# -- taking a block for a set of rows ---------------------------------------------------------


class Taken(enum.Enum):
    OWN = "reserved here"
    FOUND = "found open under its key: an earlier or concurrent attempt's"
    DONE = "an earlier attempt wrote these rows"
    REPAIRED = "found handed to repair and already repaired"


@dataclass
class Placed:
    """Where rows went, accumulated over calls of :func:`place`: the blocks written (to be
    settled or rolled back), the id ranges used, how many rows were written here and how many
    an earlier attempt (or repair) already delivers; with ``ids`` a list, each row's id."""

    blocks: list[Block] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    written: int = 0
    replayed: int = 0
    ids: list[int] | None = None


def _block_row(conn: Connection, queue: QueueInfo, lo: int):
    return conn.execute(
        "SELECT hi, skipped, released FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        (queue.queue_id, lo),
    ).one()


def _recorded_content(conn: Connection, queue: QueueInfo, key: str) -> tuple[int, int] | None:
    row = conn.execute(
        "SELECT lo, hi FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
        (queue.queue_id, content_key(key)),
    ).one()
    return None if row is None else (row.lo, row.hi)


def _record_content(conn: Connection, queue: QueueInfo, key: str, fp: int, count: int) -> None:
    # Written by the attempt that reserved the key's block, before any row: a block found
    # without it holds no rows yet (or comes from an older version of this code). A plain
    # write: only attempts of one write with the same rows race on it.
    conn.execute(
        "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?)",
        (queue.queue_id, content_key(key), fp, count),
    )


def _take(
    conn: Connection,
    queue: QueueInfo,
    key: str,
    rows: Rows,
    check_content: bool,
    key_ttl: int | None = None,
) -> tuple[Taken, monoton.Reservation]:
    n = len(rows)
    fp = rows.fingerprint() if check_content else None
    for _ in range(MAX_HOPS):
        res = monoton.reserve_keyed(conn, queue, key, n, ttl=key_ttl)
        if res.reserved_at:
            if fp is not None:
                _record_content(conn, queue, key, fp, n)
            return Taken.OWN, res
        if fp is not None:
            recorded = _recorded_content(conn, queue, key)
            # No record: a block of an older version of this code, or one whose writer has
            # not written a row yet (or died before); the count is all there is to compare.
            if recorded is None and res.count != n or recorded not in (None, (fp, n)):
                raise ReplayMismatchError(
                    f"key {key!r} names ids {res.lo}..{res.hi} written by an earlier attempt with "
                    f"other rows ({res.count} rows then, {n} now"
                    + (
                        ""
                        if recorded is None or recorded[1] != n
                        else ", same count, other content"
                    )
                    + ")"
                )
        elif res.count != n:
            raise ReplayMismatchError(
                f"reservation {key!r} holds {res.count} ids, the retry has {n} rows"
            )
        if res.closed:
            # A rollback forgets the key before it closes the block: closed while the key still
            # names it means written. (Repair never deletes a keyed block's row: one it forgot
            # reads as skipped, and restart_repair_clock then says it is repaired.)
            if key_names(conn, queue, key, res.lo):
                return Taken.DONE, res
            continue
        row = _block_row(conn, queue, res.lo)
        if row is None or row.hi is None:
            continue  # closed or rolled back since we looked: look again
        if row.released:
            # Its writer was rolling it back (maybe died doing so): finish that, start afresh.
            finish_rollback(conn, queue, res)
            continue
        if row.skipped:
            if restart_repair_clock(conn, queue, res):
                return Taken.FOUND, res
            return Taken.REPAIRED, res
        return Taken.FOUND, res
    raise ContentionError(
        f"key {key!r} of queue {queue.name!r}: its block kept changing under {MAX_HOPS} looks; "
        "another attempt of the same write is rolling back and retrying: retry later"
    )


def place(
    conn: Connection,
    queue: QueueInfo,
    key: str | None,
    rows: Rows,
    *,
    placed: Placed | None = None,
    pipeline: Pipeline | None = None,
    check_content: bool = True,
    rewrite_mismatch: bool = False,
    key_ttl: int | None = None,
    encoded: bool = False,
) -> Placed:
    """Write ``rows`` into the block ``key`` names (a new one without a key), unless an earlier
    attempt wrote them already; accumulates into ``placed``. Its blocks must be settled
    (:func:`settle`) once their writes are drained, or rolled back (:func:`roll_back`, own
    blocks only); a block is listed before its rows are sent, so a failed write rolls back.

    With ``check_content``, a key is honoured only for the rows first written under it;
    other rows raise :class:`ReplayMismatchError`, or with ``rewrite_mismatch`` are written
    under a key of their own (so an earlier attempt's rows may then be enqueued twice).
    ``key_ttl``: the keys are forgotten after that many seconds (a deduplication window).
    """
    placed = Placed() if placed is None else placed
    offsets = list(range(len(rows)))  # which of the caller's rows ``rows`` holds now
    ids: list[int] = [0] * len(rows)
    for _hop in range(MAX_HOPS):
        if key is None:
            kind, res = Taken.OWN, monoton.reserve(conn, queue, len(rows))
        else:
            try:
                kind, res = _take(conn, queue, key, rows, check_content, key_ttl)
            except ReplayMismatchError:
                if not (check_content and rewrite_mismatch):
                    raise
                new_key = f"{key}~{rows.fingerprint() & 0xFFFFFFFFFFFFFFFF:016x}:{len(rows)}"
                log.warning("key %s names other rows; writing these under %s", key, new_key)
                key = new_key
                continue
        placed.ranges.append((res.lo, res.hi))
        for i, at in enumerate(offsets):
            ids[at] = res.lo + i
        if kind is Taken.DONE:
            placed.replayed += len(rows)
            break
        if kind is Taken.REPAIRED:
            missing = undelivered(conn, queue, res.lo, len(rows))
            placed.replayed += len(rows) - len(missing)
            if not missing:
                break
            log.warning(
                "queue %s: block %d..%d of key %s was repaired before %d of its rows were "
                "written; writing them into a new block",
                queue.name,
                res.lo,
                res.hi,
                key,
                len(missing),
            )
            rows, key = rows.subset(missing), f"{key}@{res.lo}"
            offsets = [offsets[i] for i in missing]
            continue
        placed.blocks.append(Block(res, own=kind is Taken.OWN))
        placed.written += len(rows)
        faults.point("writes.before_write", queue=queue, res=res)
        write_messages(
            conn,
            queue,
            res.lo,
            rows.payloads,
            rows.headers,
            rows.delays,
            pipeline=pipeline,
            encoded=encoded,
        )
        break
    else:
        raise ContentionError(
            f"key {key!r} of queue {queue.name!r}: could not place its rows in {MAX_HOPS} "
            "blocks; retry the write"
        )
    if placed.ids is not None:
        placed.ids.extend(ids)
    return placed
