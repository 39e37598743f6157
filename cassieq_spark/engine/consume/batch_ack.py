"""Batch acknowledgement for clients, in the style of SQS DeleteMessageBatch and
ChangeMessageVisibilityBatch: ``ack_many`` and ``change_visibility_many``.

One result per receipt, in order: a stale or invalid receipt is a result, never an error for
the whole call. Acks are plain writes after a version check, as for ``ack`` (no Paxos round),
read and written a bucket at a time; visibility changes are compare-and-sets as in
``change_visibility``, one conditional batch per bucket when every receipt in it holds.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import Any

from cassandra.query import BatchStatement, BatchType

from ... import validate
from ...errors import ConfigError, InvalidReceiptError, StaleReceiptError, one_line
from ..core import clock, monoton, timers
from ..core.buckets import bucket_of
from ..core.clock import from_epoch
from ..core.messages import is_expired, remaining_ttl
from ..core.queues import QueueInfo
from ..core.receipts import PopReceipt
from .consumer import ACK_IF_HELD, Consumer
from .timer_path import ROW

ACK_CHUNK = 250  # receipts of one bucket read (``id IN``) and written (one batch) together

OK = "ok"
STALE = "stale"
INVALID = "invalid"

_VERSIONS = (
    "SELECT id, version, acked, dead, enqueued_at, grp FROM {ks}.messages "
    "WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
# The statement of ``Consumer.change_visibility``, repeated in one conditional batch.
_CHANGE_ROW = (
    "UPDATE {ks}.messages USING TTL ? SET version = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null"
)
_CHANGE_TEXT = f"BEGIN BATCH {_CHANGE_ROW}; ... APPLY BATCH"  # what the fault seam sees
_ACK_HELD_TEXT = f"BEGIN BATCH {ACK_IF_HELD}; ... APPLY BATCH"  # what the fault seam sees
_ACK = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
)


@dataclass(frozen=True)
class ReceiptResult:
    """The outcome for one receipt of ``ack_many`` / ``change_visibility_many``.

    ``status`` is ``"ok"``, ``"stale"`` (acked or redelivered since, or repeated in the same
    call) or ``"invalid"`` (not a receipt of this queue); ``reason`` says why when not ok;
    ``new_receipt`` is the receipt to use from now on after a visibility change.
    """

    receipt: str
    status: str
    reason: str | None = None
    new_receipt: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK


def receipts_list(items: Iterable, what: str, of: str) -> list:
    """A call's receipts (or pairs) as a list of at most :data:`validate.MAX_BATCH`. No more
    than one entry past the limit is taken from ``items``: an endless iterator is refused
    without being drained into memory."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise ConfigError(f"{what} must be a list of {of}, got {type(items).__name__}")
    out = list(itertools.islice(items, validate.MAX_BATCH + 1))
    if len(out) > validate.MAX_BATCH:
        has = f"{len(items)}" if isinstance(items, Sized) else f"more than {validate.MAX_BATCH}"
        raise ConfigError(f"{what} has {has} entries; at most {validate.MAX_BATCH} per call")
    return out


def visibility_pairs(entries: Iterable) -> list[tuple[str, float]]:
    """``(receipt, timeout)`` pairs, each timeout checked as ``change_visibility`` checks it."""
    pairs = []
    for i, entry in enumerate(receipts_list(entries, "entries", "(receipt, timeout) pairs")):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise ConfigError(f"entries[{i}] must be a (receipt, timeout) pair, got {entry!r}")
        what = f"entries[{i}] timeout"
        pairs.append((entry[0], validate.visibility_seconds(entry[1], what, zero=True)))
    return pairs


def _stale(queue: QueueInfo, r: PopReceipt, why: str) -> str:
    return f"pop receipt for message {r.message_id} of queue {queue.name!r} is stale: {why}"


_STALE_WHY = "the message was acked or redelivered since; get it again"


def _not_issued(queue: QueueInfo, text: object, why: str) -> str:
    return (
        f"{repr(text)[:80]} is not a receipt of queue {queue.name!r}: {why}, so no get() issued "
        "it; use the one get() returned"
    )


def never_issued(
    c: Consumer, queue: QueueInfo, found: dict[int, int | None], todo: Sequence[PopReceipt]
) -> dict[PopReceipt, str]:
    """The receipts of ``todo`` that name a delivery no get() made, with why (``found``:
    message id -> the row's version, for the rows that exist): a version above the row's
    (versions only grow, by one per delivery or visibility change), or an id the queue never allotted (at or past
    its counter, read once and only when a row is missing). A missing row below the counter
    may be a real message acked, expired or purged since: that stays "stale"."""
    out: dict[PopReceipt, str] = {}
    missing = []
    for r in todo:
        if r.message_id not in found:
            missing.append(r)
        elif r.version > (found[r.message_id] or 0):
            version = found[r.message_id] or 0
            out[r] = (
                f"message {r.message_id} has had receipts up to version {version}, not {r.version}"
            )
    if missing:
        end = monoton.counter(c.conn, queue)
        for r in missing:
            if r.message_id >= end:
                out[r] = f"the queue has no message {r.message_id} (its ids so far are below {end})"
    return out


def _decode(queue: QueueInfo, text: object) -> PopReceipt:
    r = PopReceipt.decode(text)  # type: ignore[arg-type]  # anything else is refused there
    r.check(queue, text)  # type: ignore[arg-type]
    return r


def ack_many(c: Consumer, queue: QueueInfo, receipts: Sequence[str]) -> list[ReceiptResult]:
    """Each receipt as ``ack`` would take it (a version check, then a plain write); one result
    per receipt, in order. No Paxos round: per bucket (and 250 receipts) one read and one
    single-partition batch of plain writes, all in flight at once; one counter update."""
    results: list[ReceiptResult | None] = [None] * len(receipts)
    todo: list[tuple[int, PopReceipt]] = []
    seen: set[tuple[int, int]] = set()
    for i, text in enumerate(receipts):
        try:
            r = _decode(queue, text)
        except InvalidReceiptError as exc:
            results[i] = ReceiptResult(str(text), INVALID, one_line(exc))
            continue
        if (r.message_id, r.version) in seen:
            results[i] = ReceiptResult(text, STALE, _stale(queue, r, "repeated in this call"))
            continue
        seen.add((r.message_id, r.version))
        todo.append((i, r))
    now = clock.now()
    groups: dict[int, list[tuple[int, PopReceipt]]] = {}
    for i, r in todo:
        groups.setdefault(bucket_of(r.message_id, queue.bucket_size), []).append((i, r))
    # One read per bucket (and ACK_CHUNK receipts), all in flight at once.
    parts = [
        (bucket, group[at : at + ACK_CHUNK])
        for bucket, group in groups.items()
        for at in range(0, len(group), ACK_CHUNK)
    ]
    reads = [
        c.conn.execute_async(
            _VERSIONS, (queue.queue_id, bucket, sorted({r.message_id for _, r in part}))
        )
        for bucket, part in parts
    ]
    writes = []
    done: list[PopReceipt] = []
    held: list[tuple[int, list]] = []  # grouped messages, per bucket: acked by compare-and-set
    read_rows = [{row.id: row for row in read.result()} for read in reads]
    versions = {mid: row.version for rows in read_rows for mid, row in rows.items()}
    forged = never_issued(c, queue, versions, [r for _, part in parts for _, r in part])
    for (bucket, part), rows in zip(parts, read_rows, strict=True):
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.is_idempotent = True  # setting acked = true twice changes nothing
        for i, r in part:
            row = rows.get(r.message_id)
            if r in forged:
                reason = _not_issued(queue, receipts[i], forged[r])
                results[i] = ReceiptResult(receipts[i], INVALID, reason)
                continue
            if row is None or row.acked or row.dead or row.version != r.version:
                results[i] = ReceiptResult(receipts[i], STALE, _stale(queue, r, _STALE_WHY))
                continue
            if row.grp is not None:
                if not held or held[-1][0] != bucket:
                    held.append((bucket, []))
                held[-1][1].append((i, r, row))
                continue
            key = (queue.queue_id, bucket, r.message_id)
            batch.add(c.conn.prepare(_ACK), (remaining_ttl(row, queue, now), *key))
            results[i] = ReceiptResult(receipts[i], OK)
            done.append(r)
        if len(batch):
            writes.append(c.conn.execute_async(batch))  # one partition: one mutation
    for f in writes:
        f.result()
    acked_groups: list[tuple[str, int]] = []
    for bucket, entries in held:
        won = _ack_held(c, queue, bucket, entries, now)
        for i, r, row in entries:
            if r.message_id in won:
                results[i] = ReceiptResult(receipts[i], OK)
                done.append(r)
                acked_groups.append((row.grp, r.message_id))
            else:
                results[i] = ReceiptResult(receipts[i], STALE, _stale(queue, r, _STALE_WHY))
    c.reader.heads.write_done(queue, acked_groups)
    for r in done:
        c.timers.acked(queue, r.message_id, r.version)
    if done:
        c.counters.add(queue, "acked", len(done))
    return [r for r in results if r is not None]


def _acked_by(token: str) -> Callable[[Any], bool]:
    """Whether a row read after a lost reply shows the ack that wrote ``token``."""
    return lambda cur: cur is not None and bool(cur.acked) and cur.claimed_by == token


def _ack_held(c: Consumer, queue: QueueInfo, bucket: int, entries: list, now: float) -> set[int]:
    """Ack grouped messages of one bucket, each only while its receipt's delivery holds it
    (``IF version = ?``, groups.py): one conditional batch (one Paxos round); if it does not
    apply (a receipt went stale), one compare-and-set each. The ids acked."""
    conn = c.conn
    stmt = conn.prepare(ACK_IF_HELD)
    read = ROW.format(cols="acked, claimed_by")

    def params(r: PopReceipt, row, token: str) -> tuple:
        key = (queue.queue_id, bucket, r.message_id)
        return (remaining_ttl(row, queue, now), token, *key, r.version)

    if len(entries) > 1:
        token = uuid.uuid4().hex[:16]
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        for _i, r, row in entries:
            batch.add(stmt, params(r, row, token))
        batch.query_string = _ACK_HELD_TEXT
        first = entries[0][1].message_id
        res = conn.cas(
            batch,
            (),
            read=read,
            read_params=(queue.queue_id, bucket, first),
            applied=lambda cur: cur is not None and bool(cur.acked) and cur.claimed_by == token,
        )
        if res.was_applied:
            return {r.message_id for _i, r, _row in entries}
    won = set()
    for _i, r, row in entries:
        token = uuid.uuid4().hex[:16]
        res = conn.cas(
            ACK_IF_HELD,
            params(r, row, token),
            read=read,
            read_params=(queue.queue_id, bucket, r.message_id),
            applied=_acked_by(token),
        )
        if res.was_applied:
            won.add(r.message_id)
    return won


def change_visibility_many(
    c: Consumer, queue: QueueInfo, entries: Sequence[tuple[str, float]]
) -> list[ReceiptResult]:
    """``change_visibility`` for each ``(receipt, seconds)`` (already validated); a stale or
    invalid receipt is a result, not an error. The receipts of one bucket are changed by one
    conditional batch (one Paxos round), each row on its own receipt's condition; a batch that
    does not apply (a receipt in it is stale) changed nothing, and its entries are then done
    one compare-and-set each, which tells the stale ones apart."""
    out: list[ReceiptResult | None] = [None] * len(entries)
    todo: list[tuple[int, PopReceipt, float]] = []
    seen: set[PopReceipt] = set()
    for i, (text, seconds) in enumerate(entries):
        try:
            r = _decode(queue, text)
        except InvalidReceiptError as exc:
            out[i] = ReceiptResult(str(text), INVALID, one_line(exc))
            continue
        if r in seen:  # as in ack_many: the first one decides, the repeat changes nothing
            out[i] = ReceiptResult(text, STALE, _stale(queue, r, "repeated in this call"))
            continue
        seen.add(r)
        todo.append((i, r, seconds))
    one_by_one = todo
    ids = [r.message_id for _, r, _ in todo]
    if len(todo) > 1 and len(set(ids)) == len(ids):  # one row twice: conditions would clash
        groups: dict[int, list[tuple[int, PopReceipt, float]]] = {}
        for entry in todo:
            groups.setdefault(bucket_of(entry[1].message_id, queue.bucket_size), []).append(entry)
        one_by_one = []
        for bucket, group in groups.items():
            for at in range(0, len(group), ACK_CHUNK):
                part = group[at : at + ACK_CHUNK]
                if not _change_batch(c, queue, bucket, part, entries, out):
                    one_by_one += part
    stale: list[tuple[int, PopReceipt, str]] = []
    for i, r, seconds in sorted(one_by_one, key=lambda e: e[0]):
        text = entries[i][0]
        try:
            out[i] = ReceiptResult(text, OK, new_receipt=c.change_visibility(queue, text, seconds))
        except InvalidReceiptError as exc:
            out[i] = ReceiptResult(str(text), INVALID, one_line(exc))
        except StaleReceiptError as exc:
            stale.append((i, r, one_line(exc)))
    if stale:  # a receipt no get() issued is invalid, not stale
        forged = never_issued(
            c, queue, _versions(c, queue, [r for _, r, _ in stale]), [r for _, r, _ in stale]
        )
        for i, r, reason in stale:
            text = entries[i][0]
            if r in forged:
                out[i] = ReceiptResult(text, INVALID, _not_issued(queue, text, forged[r]))
            else:
                out[i] = ReceiptResult(text, STALE, reason)
    return [r for r in out if r is not None]


def _versions(
    c: Consumer, queue: QueueInfo, receipts: Sequence[PopReceipt]
) -> dict[int, int | None]:
    """Message id -> its row's version, for the rows of ``receipts`` that exist (a read per
    bucket)."""
    groups: dict[int, set[int]] = {}
    for r in receipts:
        groups.setdefault(bucket_of(r.message_id, queue.bucket_size), set()).add(r.message_id)
    reads = [
        c.conn.execute_async(_VERSIONS, (queue.queue_id, bucket, sorted(ids)))
        for bucket, ids in groups.items()
    ]
    return {row.id: row.version for read in reads for row in read.result()}


def _change_batch(
    c: Consumer,
    queue: QueueInfo,
    bucket: int,
    part: list[tuple[int, PopReceipt, float]],
    entries: Sequence[tuple[str, float]],
    out: list[ReceiptResult | None],
) -> bool:
    """Change ``part`` (receipts of one bucket) with one conditional batch; False: nothing
    changed (some receipt is stale, or a message expired)."""
    conn = c.conn
    now = clock.now()
    ttls = dict.fromkeys((r.message_id for _, r, _ in part), 0)
    if queue.ttl:
        rows = conn.execute(_VERSIONS, (queue.queue_id, bucket, sorted(ttls)))
        found = {row.id: row for row in rows if not is_expired(row, queue, now)}
        if len(found) < len(ttls):
            return False
        ttls = {mid: remaining_ttl(row, queue, now) for mid, row in found.items()}
    # The new timers first: if we die right after the change, the messages still come back.
    # Stored where every timer path reads them (timers.store: a late write is made again,
    # due a little later).
    now, dues = timers.store(conn, queue, [(seconds, r.message_id) for _, r, seconds in part], now)
    due = [(d, r.message_id) for d, (_, r, _) in zip(dues, part, strict=True)]
    token = uuid.uuid4().hex[:16]
    batch = BatchStatement(batch_type=BatchType.LOGGED)
    stmt = conn.prepare(_CHANGE_ROW)
    for (_i, r, _s), (when, mid) in zip(part, due, strict=True):
        key = (queue.queue_id, bucket, mid)
        batch.add(stmt, (ttls[mid], r.version + 1, from_epoch(when), token, *key, r.version))
    batch.query_string = _CHANGE_TEXT
    first = part[0][1]
    res = conn.cas(
        batch,
        (),
        read=ROW.format(cols="version, claimed_by"),
        read_params=(queue.queue_id, bucket, first.message_id),
        applied=lambda cur: (
            cur is not None and cur.version == first.version + 1 and cur.claimed_by == token
        ),
    )
    if not res.was_applied:
        return False
    for i, r, _s in part:
        new = PopReceipt.issue(queue, r.message_id, r.version + 1)
        out[i] = ReceiptResult(entries[i][0], OK, new_receipt=new)
    return True
