"""``peek``: the messages a get could return now, without changing anything."""

from __future__ import annotations

from ..core.messages import Message
from ..core.queues import QueueInfo
from .consumer import Consumer


def peek(c: Consumer, info: QueueInfo, limit: int) -> list[Message]:
    """Up to ``limit`` messages that a get could return now (``limit`` already checked): what
    the client's reader sees, unclaimed and unmoved (``Reader.peek``)."""
    return c.reader.peek(info, limit)
