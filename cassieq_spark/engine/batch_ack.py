"""Batch acknowledgement for clients, in the style of SQS DeleteMessageBatch and
ChangeMessageVisibilityBatch: ``ack_many`` and ``change_visibility_many``.

One result per receipt, in order: a stale or invalid receipt is a result, never an error for
the whole call. Acks are plain writes after a version check, as for ``ack`` (no Paxos round),
read and written a bucket at a time; visibility changes are one compare-and-set each, as
``change_visibility``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cassandra.query import BatchStatement, BatchType

from .. import validate
from ..errors import ConfigError, InvalidReceiptError, StaleReceiptError, one_line
from . import clock
from .buckets import bucket_of
from .consumer import Consumer
from .messages import remaining_ttl
from .queues import QueueInfo
from .receipts import PopReceipt

ACK_CHUNK = 250  # receipts of one bucket read (``id IN``) and written (one batch) together

OK = "ok"
STALE = "stale"
INVALID = "invalid"

_VERSIONS = (
    "SELECT id, version, acked, dead, enqueued_at FROM {ks}.messages "
    "WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
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
    """A call's receipts (or pairs) as a list of at most :data:`validate.MAX_BATCH`."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise ConfigError(f"{what} must be a list of {of}, got {type(items).__name__}")
    out = list(items)
    if len(out) > validate.MAX_BATCH:
        raise ConfigError(f"{what} has {len(out)} entries; at most {validate.MAX_BATCH} per call")
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


def _decode(queue: QueueInfo, text: object) -> PopReceipt:
    r = PopReceipt.decode(text)  # type: ignore[arg-type]  # anything else is refused there
    r.check_queue(queue.queue_id, queue.name, text)  # type: ignore[arg-type]
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
    for (bucket, part), read in zip(parts, reads, strict=True):
        rows = {row.id: row for row in read.result()}
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.is_idempotent = True  # setting acked = true twice changes nothing
        for i, r in part:
            row = rows.get(r.message_id)
            if row is None or row.acked or row.dead or row.version != r.version:
                why = "the message was acked or redelivered since; get it again"
                results[i] = ReceiptResult(receipts[i], STALE, _stale(queue, r, why))
                continue
            key = (queue.queue_id, bucket, r.message_id)
            batch.add(c.conn.prepare(_ACK), (remaining_ttl(row, queue, now), *key))
            results[i] = ReceiptResult(receipts[i], OK)
            done.append(r)
        if len(batch):
            writes.append(c.conn.execute_async(batch))  # one partition: one mutation
    for f in writes:
        f.result()
    for r in done:
        c._timers.acked(queue, r.message_id, r.version)
    if done:
        c.counters.add(queue, "acked", len(done))
    return [r for r in results if r is not None]


def change_visibility_many(
    c: Consumer, queue: QueueInfo, entries: Sequence[tuple[str, float]]
) -> list[ReceiptResult]:
    """``change_visibility`` for each ``(receipt, seconds)`` (already validated): one
    compare-and-set per entry; a stale or invalid receipt is a result, not an error."""
    out = []
    for text, seconds in entries:
        try:
            new = c.change_visibility(queue, text, seconds)
        except InvalidReceiptError as exc:
            out.append(ReceiptResult(str(text), INVALID, one_line(exc)))
        except StaleReceiptError as exc:
            out.append(ReceiptResult(text, STALE, one_line(exc)))
        else:
            out.append(ReceiptResult(text, OK, new_receipt=new))
    return out
