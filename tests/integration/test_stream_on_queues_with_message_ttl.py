"""On a queue with a message TTL, what the stream and writers write after a message expires with
it, and an expired message is never delivered by a stream.

Every cell written to a message row after its insert carries what is left of the message's
TTL (F19): the stream's ``acked`` marks and a writer's rollback marks did not, so they outlived
the message (protocol review 2, G11). A claim's cells may outlive the payload (its TTL is
rounded up, and a client's clock may be behind): such a row holds no message, and a stream
delivered it as an empty one. Real Cassandra; the client's clock skewed through the fault seam.
"""

from __future__ import annotations

import time
import uuid

import pytest

from cassieq_spark.engine.core.buckets import bucket_of
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.write.keyed_write import KeyedWrite, Slice

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]

TTL = 3600


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def cell_ttl(q, queue: str, mid: int, column: str) -> int | None:
    info = q.get_queue(queue)
    row = q.conn.execute(
        f"SELECT TTL({column}) AS t FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? "
        "AND id = ?",
        (info.queue_id, bucket_of(mid, info.bucket_size), mid),
    ).one()
    return row.t


def failed_write(q, queue: str, n: int) -> None:
    """A keyed write (a sink task) that fails after its rows landed: rolled back."""
    w = KeyedWrite(
        q.conn,
        q.get_queue(queue),
        f"fail-{uuid.uuid4().hex[:8]}",
        block_size=n,
        what="a failing write",
    )

    def feed():
        yield Slice([b"r"] * n, None, None, [1] * n)
        raise RuntimeError("injected: the task fails after writing")

    with pytest.raises(RuntimeError, match="injected"):
        w.run(feed())


def test_a_stream_s_ack_of_a_client_delivered_message_expires_with_the_message(
    queue_client, queue_name, drivers
):
    """x was delivered to a client once and came due again; the stream delivers it (not
    plain, so its ack is an `acked` cell). Before the fix that cell had no TTL."""
    q = queue_client
    q.create_queue(queue_name, message_ttl=TTL)
    x = q.put(queue_name, b"x")
    assert q.get(queue_name, visibility_timeout=1.0).id == x
    time.sleep(1.1)
    d = drivers(queue_name, consumerId="g11-ack")
    d.start()
    assert d.batch() == [x]
    d.commit()
    left = cell_ttl(q, queue_name, x, "acked")
    assert left is not None and 0 < left <= TTL, left


def test_a_rolled_back_write_s_marks_expire_with_its_rows(queue_client, queue_name):
    """Before the fix the `dead` marks of a rollback had no TTL."""
    q = queue_client
    q.create_queue(queue_name, message_ttl=TTL)
    failed_write(q, queue_name, 3)
    for mid in range(3):
        left = cell_ttl(q, queue_name, mid, "dead")
        assert left is not None and 0 < left <= TTL, (mid, left)


def test_a_claim_that_outlives_its_expired_message_is_not_delivered_by_a_stream(
    queue_client, queue_name, drivers
):
    """A 2 s message claimed by a client whose clock is 8 s behind: the claim's cells get a TTL
    of what is left by that clock (about 10 s), due 0.5 s after the put. Once the payload
    expired the row holds only the claim. Before the fix the stream delivered it: an empty
    value, no `enqueued_at`. Now nothing is delivered."""
    q = queue_client
    q.create_queue(queue_name, message_ttl=2)
    x = q.put(queue_name, b"x")
    put_at = time.monotonic()
    faults.set_skew(-8.0)
    assert q.get(queue_name, visibility_timeout=8.5).id == x
    faults.set_skew(0.0)
    time.sleep(max(0.0, put_at + 2.6 - time.monotonic()))
    info = q.get_queue(queue_name)
    row = q.conn.execute(
        "SELECT enqueued_at, version FROM {ks}.messages WHERE queue_id = ? AND bucket = ? "
        "AND id = ?",
        (info.queue_id, bucket_of(x, info.bucket_size), x),
    ).one()
    assert row is not None and row.enqueued_at is None and row.version == 1  # the phantom
    d = drivers(queue_name, consumerId="g11-phantom")
    d.start()
    assert d.batch() == []
    d.commit()
    assert d.delivered == {}
