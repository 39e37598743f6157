"""A receive whose call outlasted the visibility timeout it asked for hands out nothing it
claimed: by then the message may be another consumer's (its redelivery, or its group's next
message), so two consumers would work on it at once. What it claimed is given back uncounted:
delivered again at once, never lost, and never brought nearer to its dead-letter queue or its
drop by a delivery nobody saw. The slow call is forced by pausing the claim past the
timeout."""

from __future__ import annotations

import time

import pytest

from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

VT = 1.0


def _slow(points: list[str], times: int = 1) -> list[bool]:
    """The next ``times`` claims (at any of ``points``) each pause past the visibility
    timeout; returns the list of pauses made so far."""
    calls: list[bool] = []

    def pause(**_context) -> None:
        if len(calls) < times:
            calls.append(True)
            time.sleep(VT + 0.3)

    for point in points:
        faults.on(point, pause)
    return calls


def _poll(get, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while (got := get()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def _receiver(q, queue_name: str, call: str):
    def receive():
        if call == "get":
            return q.get(queue_name, visibility_timeout=VT)
        got = q.get_many(queue_name, max_messages=10, visibility_timeout=VT)
        return got[0] if got else None

    return receive


# A get_many claims fresh messages by batch, redeliveries one at a time.
POINTS = {
    "get": ["consumer.before_claim"],
    "get_many": ["batch.before_claim", "consumer.before_claim"],
}


@pytest.mark.parametrize("call", ["get", "get_many"])
def test_a_receive_slower_than_its_visibility_timeout_hands_out_nothing_and_counts_nothing(
    queue_client, queue_name, call
):
    q = queue_client
    q.create_queue(queue_name)
    [first, second] = q.put_many(queue_name, [b"a", b"b"], group="acct-1")
    receive = _receiver(q, queue_name, call)
    _slow(POINTS[call])
    try:
        assert receive() is None  # claimed, but its visibility passed before the call returned
    finally:
        faults.reset()
    again = _poll(receive, 3.0)  # given back: due at once, not after the visibility timeout
    # The group's head comes back (never its next message), the withheld delivery uncounted.
    assert again is not None and again.id == first
    assert again.delivery_count == 1
    assert q.ack(queue_name, again.pop_receipt)
    nxt = _poll(receive)
    assert nxt is not None and nxt.id == second
    assert q.ack(queue_name, nxt.pop_receipt)
    assert q.get(queue_name) is None


@pytest.mark.parametrize("call", ["get", "get_many"])
def test_withheld_deliveries_never_drop_a_message_at_its_delivery_limit(
    queue_client, queue_name, call
):
    """A slow spell: every receive outlasts its visibility timeout, as many times as the
    queue's delivery limit. The message is neither dropped nor dead-lettered: the first
    receive that returns in time hands it out, as a first delivery."""
    q = queue_client
    q.create_queue(queue_name, max_delivery_count=2)
    [mid] = q.put_many(queue_name, [b"m"])
    receive = _receiver(q, queue_name, call)
    pauses = _slow(POINTS[call], times=2)
    deadline = time.monotonic() + 15
    try:
        while len(pauses) < 2 and time.monotonic() < deadline:
            assert receive() is None  # each claim made and withheld
    finally:
        faults.reset()
    assert len(pauses) == 2
    got = _poll(receive, 3.0)
    assert got is not None and got.id == mid and got.delivery_count == 1
    assert q.ack(queue_name, got.pop_receipt)
    assert q.stats(queue_name)["dropped"] == 0
