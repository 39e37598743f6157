"""``peek``: the messages a get could return now, without changing anything."""

from __future__ import annotations

from ..core import clock, monoton, pointers
from ..core.clock import to_epoch
from ..core.messages import COLUMNS, Message, is_done, is_expired, read_range
from ..core.queues import QueueInfo
from ..store.session import Connection


def peek(conn: Connection, info: QueueInfo, limit: int) -> list[Message]:
    """Up to ``limit`` messages that a get could return now (``limit`` already checked)."""
    now = clock.now()
    ptrs = pointers.read(conn, info)
    hz = monoton.horizon(conn, info, ptrs.reader, now)
    out: list[Message] = []
    for row in read_range(conn, info, ptrs.repair * info.bucket_size, hz.safe_end, COLUMNS):
        if is_done(row, ptrs.reader) or is_expired(row, info, now):
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
