"""Pop receipts: an opaque string naming one delivery of one message.

A receipt encodes the queue incarnation, the message id and the delivery version. A message
that comes back after its visibility timeout gets version + 1, so an older receipt can no
longer ack or extend it.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

from ..errors import StaleReceiptError

_PREFIX = "r1"


@dataclass(frozen=True)
class PopReceipt:
    queue_id: uuid.UUID
    message_id: int
    version: int

    def encode(self) -> str:
        raw = (
            self.queue_id.bytes
            + self.message_id.to_bytes(8, "big")
            + self.version.to_bytes(4, "big")
        )
        return _PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> PopReceipt:
        if not isinstance(text, str) or not text.startswith(_PREFIX):
            raise StaleReceiptError(f"{text!r} is not a pop receipt; use the one get() returned")
        body = text[len(_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (ValueError, TypeError) as exc:
            raise StaleReceiptError(f"{text!r} is not a pop receipt") from exc
        if len(raw) != 28:
            raise StaleReceiptError(f"{text!r} is not a pop receipt; use the one get() returned")
        return cls(
            queue_id=uuid.UUID(bytes=raw[:16]),
            message_id=int.from_bytes(raw[16:24], "big"),
            version=int.from_bytes(raw[24:28], "big"),
        )
