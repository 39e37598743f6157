"""A receipt no get() issued is ``invalid`` in the batch calls, not ``stale`` ("acked or
redelivered since", which sends a user looking for a consumer that never existed): an id the
queue never allotted (at or past its id counter), a version above the message's (versions grow
by one per delivery) or 0 (the first delivery is version 1). A real receipt whose message was
acked or redelivered stays ``stale``, and a receipt repeated in one ``change_visibility_many``
says so, as ``ack_many`` does. The rows of the second bad-input sweep, N8-N10, N18, N29, N32."""

from __future__ import annotations

import pytest

from cassieq_spark.client import QueueClient
from cassieq_spark.engine.core.receipts import PopReceipt

pytestmark = pytest.mark.integration


@pytest.fixture
def queue(queue_client: QueueClient, queue_name: str):
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [f"m{i}".encode() for i in range(6)])
    return queue_client.get_queue(queue_name)


def _receipt(info, message_id: int, version: int) -> str:
    return PopReceipt.issue(info, message_id, version)


def test_ack_many_calls_receipts_no_get_issued_invalid(queue_client: QueueClient, queue) -> None:
    """N8 (id 2**63-1, version 0), N9 (id 2**62, far past the counter), N10 (a real id with
    version 2**31-1); a real receipt next to them is acked, and the same receipt again is
    stale."""
    held = queue_client.get(queue.name, visibility_timeout=60)
    assert held is not None
    forged = [
        _receipt(queue, 2**63 - 1, 0),
        _receipt(queue, 2**62, 1),
        _receipt(queue, held.id, 2**31 - 1),
    ]
    results = queue_client.ack_many(queue.name, [*forged, held.pop_receipt])
    assert [r.status for r in results] == ["invalid", "invalid", "invalid", "ok"], results
    assert "is not a pop receipt" in results[0].reason  # version 0: refused as it is read
    assert f"the queue has no message {2**62}" in results[1].reason, results[1].reason
    assert f"has had receipts up to version 1, not {2**31 - 1}" in results[2].reason, results[
        2
    ].reason
    again = queue_client.ack_many(queue.name, [held.pop_receipt])
    assert again[0].status == "stale", again
    assert queue_client.stats(queue.name)["acked"] == 1


def test_a_thousand_forged_receipts_in_their_own_buckets_are_all_invalid(
    queue_client: QueueClient, queue
) -> None:
    """N18: 1,000 receipts with ids past the counter, each in a bucket of its own; one read of
    the counter decides them all."""
    forged = [_receipt(queue, 10**12 + i * queue.bucket_size, 1) for i in range(1000)]
    results = queue_client.ack_many(queue.name, forged)
    assert {r.status for r in results} == {"invalid"} and len(results) == 1000
    assert queue_client.stats(queue.name)["acked"] == 0


def test_a_receipt_below_the_counter_without_a_row_stays_stale(
    queue_client: QueueClient, queue
) -> None:
    """An id the queue allotted whose row is gone may be a real message acked and reclaimed
    or purged since: not provably forged."""
    m = queue_client.get(queue.name, visibility_timeout=60)
    assert m is not None
    queue_client.purge(queue.name)
    [result] = queue_client.ack_many(queue.name, [m.pop_receipt])
    assert result.status == "stale", result


def test_change_visibility_many_says_repeated_and_invalid(queue_client: QueueClient, queue) -> None:
    """N29 (one receipt twice: the second 'repeated in this call', as ack_many says) and N32
    (a forged receipt next to a real one, which is still changed)."""
    a = queue_client.get(queue.name, visibility_timeout=60)
    b = queue_client.get(queue.name, visibility_timeout=60)
    assert a is not None and b is not None
    results = queue_client.change_visibility_many(
        queue.name, [(a.pop_receipt, 30), (a.pop_receipt, 40)]
    )
    assert [r.status for r in results] == ["ok", "stale"], results
    assert "repeated in this call" in results[1].reason, results[1].reason
    results = queue_client.change_visibility_many(
        queue.name,
        [(b.pop_receipt, 30), (_receipt(queue, 2**62, 1), 30), (_receipt(queue, b.id, 7), 30)],
    )
    assert [r.status for r in results] == ["ok", "invalid", "invalid"], results
    assert f"the queue has no message {2**62}" in results[1].reason
    assert "has had receipts up to version 2, not 7" in results[2].reason, results[2].reason
    # The stale path is unchanged: the first receipt of b was replaced by the change above.
    [old] = queue_client.change_visibility_many(queue.name, [(b.pop_receipt, 5)])
    assert old.status == "stale" and "acked or redelivered since" in old.reason, old
