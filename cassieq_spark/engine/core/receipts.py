"""Pop receipts: an opaque string naming one delivery of one message.

A receipt encodes the queue incarnation, the message id and the delivery version. A message
that comes back after its visibility timeout gets version + 1, so an older receipt can no
longer ack or extend it.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

from ...errors import InvalidReceiptError
from ...validate import MAX_BIGINT, MAX_INT

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
        bad = InvalidReceiptError(
            f"{repr(text)[:80]} is not a pop receipt; use the one get() returned"
        )
        if not isinstance(text, str) or not text.startswith(_PREFIX):
            raise bad
        body = text[len(_PREFIX) :]
        try:
            # validate: characters outside the alphabet (a pasted newline) are refused,
            # not skipped
            raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
        except (ValueError, TypeError):
            raise bad from None
        if len(raw) != 28:
            raise bad
        receipt = cls(
            queue_id=uuid.UUID(bytes=raw[:16]),
            message_id=int.from_bytes(raw[16:24], "big"),
            version=int.from_bytes(raw[24:28], "big"),
        )
        # get() never hands out such numbers (ids and versions are bigint and int columns;
        # a message's first delivery has version 1).
        if receipt.message_id > MAX_BIGINT or not 1 <= receipt.version <= MAX_INT:
            raise bad
        return receipt

    def check_queue(self, queue_id: uuid.UUID, queue_name: str, text: str) -> None:
        if self.queue_id != queue_id:
            raise InvalidReceiptError(
                f"{repr(text)[:80]} is not a receipt of queue {queue_name!r}: it was issued by "
                "another queue (or by an earlier queue of this name, deleted since); ack it on "
                "the queue its message came from"
            )
