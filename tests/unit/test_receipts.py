from __future__ import annotations

import base64
import uuid

import pytest

from cassieq_spark.engine.core.queues import QueueInfo
from cassieq_spark.engine.core.receipts import PopReceipt, new_receipt_key
from cassieq_spark.errors import InvalidReceiptError, StaleReceiptError


def _queue(name: str = "q") -> QueueInfo:
    return QueueInfo(name=name, queue_id=uuid.uuid4(), receipt_key=new_receipt_key())


def test_an_issued_receipt_decodes_to_its_parts_and_checks() -> None:
    q = _queue()
    text = PopReceipt.issue(q, 2**40 + 7, 3)
    assert text.startswith("r2") and "=" not in text and len(text) == 56
    r = PopReceipt.decode(text)
    assert (r.queue_id, r.message_id, r.version) == (q.queue_id, 2**40 + 7, 3)
    r.check(q, text)


def test_each_delivery_has_its_own_receipt() -> None:
    q = _queue()
    assert PopReceipt.issue(q, 1, 1) != PopReceipt.issue(q, 1, 2)


def test_a_receipt_made_from_another_delivery_s_tag_is_refused() -> None:
    """Ids and versions are guessable; the tag of one delivery does not fit another."""
    q = _queue()
    real = PopReceipt.decode(PopReceipt.issue(q, 10, 1))
    for mid in (7, 13):
        made = PopReceipt(q.queue_id, mid, 1, real.tag)
        raw = made.queue_id.bytes + mid.to_bytes(8, "big") + (1).to_bytes(4, "big") + made.tag
        text = "r2" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
        with pytest.raises(InvalidReceiptError, match="its tag does not match"):
            PopReceipt.decode(text).check(q, text)


def test_the_same_ids_under_another_queue_s_key_are_refused() -> None:
    q = _queue()
    twin = QueueInfo(name="q", queue_id=q.queue_id, receipt_key=new_receipt_key())
    text = PopReceipt.issue(twin, 5, 1)
    with pytest.raises(InvalidReceiptError, match="its tag does not match"):
        PopReceipt.decode(text).check(q, text)


def test_a_receipt_of_the_unsigned_format_is_refused_with_what_to_do() -> None:
    q = _queue("jobs")
    raw = q.queue_id.bytes + (4).to_bytes(8, "big") + (1).to_bytes(4, "big")
    old = "r1" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with pytest.raises(InvalidReceiptError, match="before receipts were signed.*get the message"):
        PopReceipt.decode(old)


def test_a_queue_definition_never_prints_its_receipt_key() -> None:
    q = _queue()
    assert q.receipt_key is not None
    assert "receipt_key" not in q.as_dict() and q.receipt_key.hex() not in repr(q)


@pytest.mark.parametrize(
    "bad", ["", "xyz", "r1", "r2", "r1!!!!", "r2" + "A" * 10, "r2" + "A" * 54 + "\n", None, 5]
)
def test_garbage_is_rejected_clearly(bad):
    with pytest.raises(StaleReceiptError, match="not a pop receipt"):
        PopReceipt.decode(bad)
