"""Moving messages between queues: ``redrive`` (dead letters back to work) and ``move``.

A mover is a consumer of the source: it receives a message (claimed for the move's visibility
timeout, like any get), writes it to the destination, then acks it in the source. A message the
destination refuses (larger than its max_payload_bytes) is given back at once, its delivery not
counted: a refused move, however often retried, never dead-letters or drops a message. The write is
keyed by the source message's id, so a mover that dies between the write and the ack leaves a
message that reappears in the source and whose next move finds the first copy instead of
writing a second one: every message lands in the destination once. An ack that comes back
stale means another mover took the message over after our visibility timeout ran out; the key
made its write and ours the same copy.

The keys stay in the destination's ``reservation_keys`` (one row per moved message) for the
table's TTL (14 days), far longer than any claim (at most 12 hours): a key deleted while a
slow mover still holds an expired claim would let that mover write a second copy.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from ...errors import ConfigError
from ..core.counters import Counters
from ..core.messages import Message
from ..core.progress import ProgressSink, ProgressTask, start_task
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from ..write.producer import enqueue
from .deadletter import HEADER_ORIGIN_QUEUE

log = logging.getLogger(__name__)

HEADER_REDRIVE_COUNT = "cassieq-redrive-count"
HEADER_MOVED_FROM = "cassieq-moved-from"


@dataclass
class MoveReport:
    """What one redrive or move did; ``taken_over``: messages whose ack found another mover had
    claimed them since (their copy was written once all the same)."""

    source: str
    destination: str
    moved: int = 0
    taken_over: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def move_key(source: QueueInfo, message_id: int) -> str:
    """The destination's reservation key of one source message's copy."""
    return f"move:{source.queue_id}:{message_id}"


def _redrive_count(headers: dict[str, str]) -> str:
    try:
        return str(int(headers.get(HEADER_REDRIVE_COUNT, "0")) + 1)
    except ValueError:  # a header someone else set: start counting here
        return "1"


def moved_headers(headers: dict[str, str], source: QueueInfo, redrive: bool) -> dict[str, str]:
    """A moved message's headers, from its source headers alone (so a repeated write of the
    same message computes the same ones): a redrive keeps the dead-letter provenance and
    counts redrives, a plain move records the queue the message came from."""
    out = dict(headers)
    if redrive:
        out[HEADER_REDRIVE_COUNT] = _redrive_count(out)
    else:
        out[HEADER_MOVED_FROM] = source.name
    return out


def refused_move(
    source: QueueInfo, destination: QueueInfo, message: Message, *, given_back: bool, moved: int
) -> ConfigError:
    """The error for ``message``, larger than ``destination``'s max_payload_bytes: says where the
    message is now (``given_back``: visible again in the source, its delivery not counted;
    otherwise another consumer claimed it meanwhile) and how many were ``moved`` before it."""
    where = (
        "it stays in the source, visible again, its delivery not counted"
        if given_back
        else "another consumer holds it now"
    )
    return ConfigError(
        f"message {message.id} of {source.name!r} has {len(message.payload)} bytes, more "
        f"than {destination.name!r} accepts ({destination.max_payload_bytes}); {where} "
        f"({moved} moved before it)"
    )


def finish_move(
    task: ProgressTask, report: MoveReport, *, redrive: bool, how: str, logger: logging.Logger
) -> MoveReport:
    """Ends a redrive or move that ran to the end: the task's final counts, one log line on
    ``logger`` (``how`` the move ran: one at a time, in batches), the report returned."""
    task.finish(moved=report.moved, taken_over=report.taken_over)
    logger.info(
        "%s %s -> %s %s: %d moved, %d taken over by another mover",
        "redrive" if redrive else "move",
        report.source,
        report.destination,
        how,
        report.moved,
        report.taken_over,
    )
    return report


def move_messages(
    conn: Connection,
    counters: Counters,
    consumer,
    source: QueueInfo,
    destination: QueueInfo,
    *,
    max_messages: int | None,
    visibility_timeout: float,
    redrive: bool,
    progress: ProgressSink | None = None,
    total_hint: int | None = None,
) -> MoveReport:
    """Move up to ``max_messages`` (all visible ones if None) from ``source`` to
    ``destination`` one message at a time (``batch_moves.move_in_batches`` is the fast path;
    this one stays for comparison and as the simplest form of the protocol). ``redrive`` keeps the dead-letter provenance headers and counts redrives;
    a plain move records the queue the message came from."""
    from . import batch_moves  # the batch path imports this module

    if source.queue_id == destination.queue_id:
        raise ConfigError(f"cannot move queue {source.name!r} onto itself: choose another --to")
    report = MoveReport(source.name, destination.name)
    task = start_task(
        progress,
        "redrive" if redrive else "move",
        f"{source.name} -> {destination.name}",
        max_messages if max_messages is not None else total_hint,
    )
    while max_messages is None or report.moved + report.taken_over < max_messages:
        message = consumer.get(source, visibility_timeout)
        if message is None:
            break
        headers = moved_headers(dict(message.headers), source, redrive)
        if len(message.payload) > destination.max_payload_bytes:
            # Given back as it was: a refused move never counts as a delivery, so retrying it
            # never dead-letters or drops the message.
            back = consumer.return_unused(source, message)
            raise refused_move(source, destination, message, given_back=back, moved=report.moved)
        # A redelivery may be of a message a batch mover planned: its batch is the one copy.
        if message.delivery_count <= 1 or not batch_moves.replay_marked(
            conn, counters, source, destination, message.id, redrive
        ):
            enqueue(
                conn,
                counters,
                destination,
                [message.payload],
                [headers],
                key=move_key(source, message.id),
            )
        faults.point("move.written", source=source, message=message)
        if consumer.ack(source, message.pop_receipt):
            report.moved += 1
            task.advance(1, moved=1)
        else:
            report.taken_over += 1
            task.advance(1, taken_over=1)
    return finish_move(task, report, redrive=redrive, how="one at a time", logger=log)


__all__ = [
    "HEADER_MOVED_FROM",
    "HEADER_ORIGIN_QUEUE",
    "HEADER_REDRIVE_COUNT",
    "MoveReport",
    "finish_move",
    "move_messages",
    "moved_headers",
    "refused_move",
]
