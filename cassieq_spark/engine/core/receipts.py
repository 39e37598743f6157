"""Pop receipts: an opaque string naming one delivery of one message, that only the delivery
knows.

A receipt carries the queue incarnation, the message id, the delivery version and a tag: a
truncated HMAC-SHA256 of the three under the queue's receipt key (a random key stored with the
queue's definition, ``queues.receipt_key``). A message that comes back after its visibility
timeout gets version + 1, so an older receipt can no longer ack or extend it; the tag makes a
receipt impossible to derive from ids: the queue id, the message ids and the versions can all
be guessed or read elsewhere (ids are sequential, a first delivery is version 1), the key is
never handed out by the HTTP service. Whoever can read the ``queues`` table holds the key, but
can also write the ``messages`` table: the key keeps out those who hold only receipts (HTTP
clients, holders of a signed URL), not those who hold Cassandra.

Checking a receipt costs one HMAC over 28 bytes (about a microsecond) and no round trip: every
client reads the queue's definition, key included, before it acks (and keeps it
``QUEUE_CACHE_SECONDS``).

Receipts issued before the key existed (prefix ``r1``, no tag) are refused with
:class:`InvalidReceiptError` saying so; their messages are delivered again once their
visibility timeout ends (docs/internals/protocol.md, "Receipts only their delivery knows").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import InvalidReceiptError
from ...validate import MAX_BIGINT, MAX_INT

if TYPE_CHECKING:
    from .queues import QueueInfo

_PREFIX = "r2"
_UNSIGNED_PREFIX = "r1"  # the format before receipts carried a tag
RECEIPT_KEY_BYTES = 32
TAG_BYTES = 12
_IDS_BYTES = 16 + 8 + 4
_DOMAIN = b"cassieq-pop-receipt\n"


def new_receipt_key() -> bytes:
    """A queue's receipt key: random, made once per queue incarnation."""
    return secrets.token_bytes(RECEIPT_KEY_BYTES)


def _ids(queue_id: uuid.UUID, message_id: int, version: int) -> bytes:
    return queue_id.bytes + message_id.to_bytes(8, "big") + version.to_bytes(4, "big")


def _tag(key: bytes, ids: bytes) -> bytes:
    return hmac.new(key, _DOMAIN + ids, hashlib.sha256).digest()[:TAG_BYTES]


def _key_of(queue: QueueInfo) -> bytes:
    key = queue.receipt_key
    if not key:
        # queues.get_queue gives every queue a key before it returns it: a definition
        # without one came from somewhere else (list_queues of a row not yet keyed).
        raise InvalidReceiptError(
            f"queue {queue.name!r} was read without its receipt key; read it with get_queue "
            "(QueueClient.get_queue) before a get or an ack"
        )
    return key


@dataclass(frozen=True)
class PopReceipt:
    queue_id: uuid.UUID
    message_id: int
    version: int
    tag: bytes = b""

    @classmethod
    def issue(cls, queue: QueueInfo, message_id: int, version: int) -> str:
        """The receipt of delivery ``version`` of message ``message_id`` of ``queue``."""
        ids = _ids(queue.queue_id, message_id, version)
        raw = ids + _tag(_key_of(queue), ids)
        return _PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> PopReceipt:
        """The parts of ``text``, not yet checked against a queue (:meth:`check`)."""
        bad = InvalidReceiptError(
            f"{repr(text)[:80]} is not a pop receipt; use the one get() returned"
        )
        if not isinstance(text, str) or text[:2] not in (_PREFIX, _UNSIGNED_PREFIX):
            raise bad
        body = text[len(_PREFIX) :]
        try:
            # validate: characters outside the alphabet (a pasted newline) are refused,
            # not skipped
            raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
        except (ValueError, TypeError):
            raise bad from None
        if text.startswith(_UNSIGNED_PREFIX) and len(raw) == _IDS_BYTES:
            raise InvalidReceiptError(
                f"{text[:80]!r} is a pop receipt of the format before receipts were signed "
                "(cassieq schema version 11 and older): it can no longer ack or change its "
                "message, which is delivered again when its visibility timeout ends; get the "
                "message again"
            )
        if not text.startswith(_PREFIX) or len(raw) != _IDS_BYTES + TAG_BYTES:
            raise bad
        receipt = cls(
            queue_id=uuid.UUID(bytes=raw[:16]),
            message_id=int.from_bytes(raw[16:24], "big"),
            version=int.from_bytes(raw[24:28], "big"),
            tag=raw[28:],
        )
        # get() never hands out such numbers (ids and versions are bigint and int columns;
        # a message's first delivery has version 1).
        if receipt.message_id > MAX_BIGINT or not 1 <= receipt.version <= MAX_INT:
            raise bad
        return receipt

    def check(self, queue: QueueInfo, text: str) -> None:
        """Refuse a receipt ``queue`` did not issue: another queue's (or an earlier
        incarnation's), or one whose tag is not its delivery's (made up from ids)."""
        if self.queue_id != queue.queue_id:
            raise InvalidReceiptError(
                f"{repr(text)[:80]} is not a receipt of queue {queue.name!r}: it was issued by "
                "another queue (or by an earlier queue of this name, deleted since); ack it on "
                "the queue its message came from"
            )
        want = _tag(_key_of(queue), _ids(self.queue_id, self.message_id, self.version))
        if not hmac.compare_digest(want, self.tag):
            raise InvalidReceiptError(
                f"{repr(text)[:80]} is not a receipt queue {queue.name!r} issued: its tag does "
                "not match its message and delivery (a receipt works only exactly as get() "
                "returned it)"
            )
