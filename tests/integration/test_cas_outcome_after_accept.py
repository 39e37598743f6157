"""A compare-and-set whose proposal was accepted and whose caller then got an error, or a copy
sent again (which finds the first copy's write and says "not applied"), is read as applied
wherever it did apply: the queue made stays made, the reservation taken stays taken,
the loss report claimed is ours.

Cassandra 5.0 raises Unavailable and Overloaded for a compare-and-set also after the accept,
and an accepted proposal is completed by the next round on its partition. The driver's re-send
is what ``faults.RETRIED`` does; ``faults.UNAVAILABLE_AFTER`` applies the statement and then
raises Unavailable, as the coordinator does when a replica dies between accept and commit.
"""

from __future__ import annotations

import pytest

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.upkeep import lost

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

QUEUE_INSERT = r"INSERT INTO \S*queues"


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _roundtrip(client, name: str) -> None:
    """The queue works: a put is delivered and acked."""
    mid = client.put(name, b"x")
    msg = client.get(name)
    assert msg is not None and msg.id == mid and msg.payload == b"x"
    assert client.ack(name, msg.pop_receipt)


@pytest.mark.parametrize("exist_ok", [True, False], ids=["exist_ok", "new"])
def test_create_queue_sent_again_after_it_applied_keeps_the_queue_it_made(
    queue_client, queue_name, exist_ok
):
    """G6: the second copy of the queue row's insert found the first and said "not applied";
    create_queue took its own queue for someone else's, deleted the pointers and the counter
    of the incarnation it had just named, then returned it (or raised QueueExistsError): every
    reservation failed with ContentionError after 200 attempts."""
    faults.inject(faults.RETRIED, QUEUE_INSERT)
    info = queue_client.create_queue(queue_name, exist_ok=exist_ok, repair_timeout=30)
    assert queue_client.get_queue(queue_name).queue_id == info.queue_id
    _roundtrip(queue_client, queue_name)


@pytest.mark.fast
def test_create_queue_unavailable_after_it_applied_keeps_the_queue_it_made(
    queue_client, queue_name
):
    """G6: Unavailable after the accept is settled by reading, like a timeout."""
    faults.inject(faults.UNAVAILABLE_AFTER, QUEUE_INSERT)
    info = queue_client.create_queue(queue_name, repair_timeout=30)
    assert queue_client.get_queue(queue_name).queue_id == info.queue_id
    _roundtrip(queue_client, queue_name)


@pytest.mark.fast
def test_a_reservation_unavailable_after_it_applied_is_used_not_orphaned(queue_client, queue_name):
    """G6: ``cas()`` re-raised Unavailable as if nothing applied; the reservation that did
    apply stayed open, readers passed it after the repair timeout and repair counted its ids
    lost (a false DataLossError downstream). Now the write uses it and closes it."""
    queue_client.create_queue(queue_name, repair_timeout=30)
    faults.inject(faults.UNAVAILABLE_AFTER, r"BEGIN BATCH")
    assert queue_client.put(queue_name, b"a") == 0
    assert queue_client.put(queue_name, b"b") == 1
    info = queue_client.get_queue(queue_name)
    hz = monoton.horizon(queue_client.conn, info, 0)
    assert (hz.next_id, hz.safe_end, hz.open_count) == (2, 2, 0)


@pytest.mark.fast
def test_a_loss_report_claim_sent_again_after_it_applied_is_ours(queue_client, queue_name):
    """G6: the claim that makes a run the one that reports a lost range applied, then was
    sent again: the copy said "not applied" and the run took the range for reported by
    another, so nobody reported it."""
    info = queue_client.create_queue(queue_name, repair_timeout=30)
    lost.record(queue_client.conn, info, 10, 15, [10, 11, 12, 13, 14])
    (rng,) = lost.unreported(queue_client.conn, info)
    faults.inject(faults.RETRIED, r"SET reported_by")
    assert lost.mark_reported(queue_client.conn, info, rng, "run-1")
    assert lost.unreported(queue_client.conn, info) == []
    assert not lost.mark_reported(queue_client.conn, info, rng, "run-2")
