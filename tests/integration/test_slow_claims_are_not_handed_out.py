"""A receive whose call outlasted the visibility timeout it asked for hands out nothing it
claimed: by then the message may be another consumer's (its redelivery, or its group's next
message), so two consumers would work on it at once. The message is delivered again by its
timer, never lost. The slow call is forced by pausing the claim past the timeout."""

from __future__ import annotations

import time

import pytest

from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

VT = 1.0


def _slow_once(point: str) -> None:
    calls = []

    def pause(**_context) -> None:
        if not calls:
            calls.append(True)
            time.sleep(VT + 0.3)

    faults.on(point, pause)


def _poll(get, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while (got := get()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


@pytest.mark.parametrize("call", ["get", "get_many"])
def test_a_receive_slower_than_its_visibility_timeout_hands_out_nothing(
    queue_client, queue_name, call
):
    q = queue_client
    q.create_queue(queue_name)
    [first, second] = q.put_many(queue_name, [b"a", b"b"], group="acct-1")

    def receive():
        if call == "get":
            return q.get(queue_name, visibility_timeout=VT)
        got = q.get_many(queue_name, max_messages=10, visibility_timeout=VT)
        return got[0] if got else None

    _slow_once("consumer.before_claim" if call == "get" else "batch.before_claim")
    try:
        assert receive() is None  # claimed, but its visibility passed before the call returned
    finally:
        faults.reset()
    again = _poll(receive)
    # The group's head comes back (never its next message), with this delivery counted.
    assert again is not None and again.id == first
    assert again.delivery_count == 2
    assert q.ack(queue_name, again.pop_receipt)
    nxt = _poll(receive)
    assert nxt is not None and nxt.id == second
    assert q.ack(queue_name, nxt.pop_receipt)
    assert q.get(queue_name) is None
