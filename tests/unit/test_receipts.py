from __future__ import annotations

import uuid

import pytest

from cassieq_spark.engine.core.receipts import PopReceipt
from cassieq_spark.errors import StaleReceiptError


def test_round_trip():
    r = PopReceipt(uuid.uuid4(), 2**40 + 7, 3)
    text = r.encode()
    assert text.startswith("r1") and "=" not in text
    assert PopReceipt.decode(text) == r


def test_versions_differ():
    qid = uuid.uuid4()
    assert PopReceipt(qid, 1, 1).encode() != PopReceipt(qid, 1, 2).encode()


@pytest.mark.parametrize("bad", ["", "xyz", "r1", "r1!!!!", "r1" + "A" * 10, None, 5])
def test_garbage_is_rejected_clearly(bad):
    with pytest.raises(StaleReceiptError, match="not a pop receipt"):
        PopReceipt.decode(bad)
