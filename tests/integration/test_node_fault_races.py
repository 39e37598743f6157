"""The two races the 3-node Spark fault test found (docs/cluster.md), forced deterministically on
the real Cassandra through the fault seam (``engine/store/faults.py``):

* a compare-and-set whose outcome is unknown, and whose settling SERIAL read also times out
  while a replica is frozen or restarting, must keep reading rather than hand the timeout to
  its caller (a sink task, which Spark then fails);
* a lease renewal that did not apply, or that applied after its caller was told it had not (a
  later Paxos round completed it), leaves the lease with this run: only another run's token
  means the lease is lost.
"""

from __future__ import annotations

import threading
import time

import pytest

from cassieq_spark.engine.core import monoton, pointers
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.store.session import SERIAL_READ_ATTEMPTS
from cassieq_spark.errors import QueueBusyError

pytestmark = [pytest.mark.integration]

RENEWAL = r"UPDATE \S+\.pointers SET lease_until = \? WHERE"


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def renewal_with_unknown_outcome(lease) -> object:
    """A renewal by the query's own thread whose outcome the run never learns (its settle read
    timed out too): the lease_until it sent, which it did not adopt."""
    sent: list = []

    def unknown_outcome(until, **_):
        if threading.current_thread().name != "cassieq-lease":
            sent.append(until)
            raise TimeoutError("injected: renewal outcome unknown")

    faults.on("lease.before_renew", unknown_outcome)
    with pytest.raises(TimeoutError):
        lease.renew()
    faults.reset()
    return sent[0]


def set_lease_until(queue_client, q, owner: str, until) -> None:
    """Write ``lease_until`` under ``owner`` with a compare-and-set, as a Paxos round would: a
    late completion of a renewal, or another run's renewal."""
    assert queue_client.conn.cas(
        "UPDATE {ks}.pointers SET lease_until = ? WHERE queue_id = ? IF lease_owner = ?",
        (until, q.queue_id, owner),
        read="SELECT lease_owner, lease_until FROM {ks}.pointers WHERE queue_id = ?",
        read_params=(q.queue_id,),
        applied=lambda row: row is not None and row.lease_until == until,
    ).was_applied


def _put_through_slow_serial_reads(client, queue: str, reservation_fault: str, slow_read: str):
    """One put whose reservation meets ``reservation_fault`` and whose serial read matching
    ``slow_read`` then times out more often than the quick-retry count; its id."""
    faults.inject(reservation_fault, r"UPDATE \S+\.monoton SET next")
    slow = faults.inject(faults.TIMEOUT_BEFORE, slow_read, times=SERIAL_READ_ATTEMPTS + 2)
    mid = client.put(queue, b"once")
    assert slow.hits == SERIAL_READ_ATTEMPTS + 2
    faults.reset()
    return mid


def test_settle_read_outlasts_a_slow_cluster(queue_client, queue_name):
    """A put's reservation applies but its reply is lost, and the SERIAL reads that settle it
    time out more often than the quick-retry count (a frozen replica holding the Paxos round).
    Old code (verified): the fifth timeout reached the caller. Now the read goes on within its
    time budget; the put returns one id and the queue holds that one message."""
    queue_client.create_queue(queue_name)
    mid = _put_through_slow_serial_reads(
        queue_client, queue_name, faults.LOST_REPLY, r"SELECT next, owner FROM"
    )
    got = queue_client.get(queue_name)
    assert got is not None and got.id == mid and got.payload == b"once"
    assert queue_client.ack(queue_name, got.pop_receipt)
    assert queue_client.get(queue_name) is None
    assert queue_client.stats(queue_name)["acked"] == 1


def test_counter_read_after_a_reservation_that_did_not_apply_outlasts_a_slow_cluster(
    queue_client, queue_name
):
    """A reservation times out before it runs, so its settling read finds no block and the
    writer reads the counter at the serial level, while a Paxos round held up by a restarting
    replica makes that read time out too. Seen in CI (2026-11-24, rolling restart of a 3-node
    cluster): the sink task failed with the WriteTimeout of that read and the query stopped.
    Now the counter read goes on within the serial-read budget; the put returns one id."""
    queue_client.create_queue(queue_name)
    first = queue_client.put(queue_name, b"first")  # the writer now knows the counter: no read
    mid = _put_through_slow_serial_reads(
        queue_client, queue_name, faults.TIMEOUT_BEFORE, r"SELECT next, lo FROM"
    )
    got = [queue_client.get(queue_name) for _ in range(2)]
    assert [(m.id, m.payload) for m in got] == [(first, b"first"), (mid, b"once")]
    assert all(queue_client.ack(queue_name, m.pop_receipt) for m in got)
    assert queue_client.get(queue_name) is None


def test_lease_renewal_not_applied_keeps_the_lease(queue_client, queue_name, drivers):  # noqa: F811
    """The renewal times out before it runs; the SERIAL read says it did not apply, and the row
    still shows this run. Old code (verified): renew() declared the lease lost ("another run of
    this query took over its lease") and the query stopped. Now it renews again and the batch
    is acked."""
    queue_client.create_queue(queue_name)
    ids = queue_client.put_many(queue_name, [b"r"] * 10)
    d = drivers(queue_name, consumerId="race2")
    d.start()
    assert d.batch() == ids
    lease = d.reader._streams[queue_name].consumer.lease
    rule = faults.inject(faults.TIMEOUT_BEFORE, RENEWAL)
    lease.renew()
    assert rule.hits == 1
    d.commit()
    st = queue_client.stats(queue_name)
    assert st["reader_pointer"] == 10 and st["acked"] == 10
    p = pointers.read(queue_client.conn, queue_client.get_queue(queue_name))
    assert p.lease_owner == "stream:race2" and p.lease_token == lease.token


def test_lease_renewal_applied_late_is_still_ours(queue_client, queue_name, drivers):  # noqa: F811
    """A renewal's outcome stays unknown to the run (its settle read failed too), and a later
    Paxos round completes it: the row now holds a token this run sent but never adopted. The
    run's next pointer move meets that token. Old code (verified): it took the token for another
    run's and stopped with QueueBusyError. Now it recognises its own renewal and acks; another
    run's token still means the lease is lost."""
    queue_client.create_queue(queue_name)
    q = queue_client.get_queue(queue_name)
    ids = queue_client.put_many(queue_name, [b"g"] * 10)
    d = drivers(queue_name, consumerId="race3")
    d.start()
    assert d.batch() == ids
    lease = d.reader._streams[queue_name].consumer.lease
    token = lease.token
    set_lease_until(queue_client, q, "stream:race3", renewal_with_unknown_outcome(lease))
    d.commit()
    st = queue_client.stats(queue_name)
    assert st["reader_pointer"] == 10 and st["acked"] == 10
    assert lease.token != token and lease.lost is None

    # Another run's token is not ours: the fence still holds.
    queue_client.put_many(queue_name, [b"h"] * 5)
    assert len(d.batch()) == 5
    set_lease_until(queue_client, q, "stream:race3", pointers.lease_time(time.time() + 30))
    with pytest.raises(QueueBusyError, match="another run of this query"):
        d.commit()
    assert queue_client.stats(queue_name)["reader_pointer"] == 10


def test_pointer_move_meeting_a_late_renewal_adopts_it(queue_client, queue_name, drivers):  # noqa: F811
    """Same late renewal, met first by a fenced pointer move rather than by a renewal. Old code
    (verified): the move declared the lease lost. Now it adopts the token it wrote and retries."""
    queue_client.create_queue(queue_name)
    q = queue_client.get_queue(queue_name)
    d = drivers(queue_name, consumerId="race4")
    d.start()
    lease = d.reader._streams[queue_name].consumer.lease
    late = renewal_with_unknown_outcome(lease)
    set_lease_until(queue_client, q, "stream:race4", late)
    assert lease.advance("reader", 0) is False  # already there: nothing to move
    assert lease.token == late and lease.lost is None
    ids = queue_client.put_many(queue_name, [b"m"] * 4)
    assert d.batch() == ids
    d.commit()
    assert queue_client.stats(queue_name)["acked"] == 4


def test_keyed_reservation_claim_not_applied_is_claimed_again(queue_client, queue_name):
    """A sink task's claim of its reservation key (replay-keyed writes) times out before it
    runs; the SERIAL read finds the key free. Old code (verified in the 3-node run, and here):
    it gave its block back and failed the task with "reservation key ... vanished while it was
    being claimed". Now it claims the key again with the same block, and a replay of the task
    finds that block."""
    queue_client.create_queue(queue_name)
    q = queue_client.get_queue(queue_name)
    rule = faults.inject(faults.TIMEOUT_BEFORE, r"INSERT INTO \S+\.reservation_keys")
    res = monoton.reserve_keyed(queue_client.conn, q, "s:race5:0:1:0", 10)
    assert rule.hits == 1
    assert res.hi - res.lo == 10 and not res.closed
    again = monoton.reserve_keyed(queue_client.conn, q, "s:race5:0:1:0", 10)
    assert (again.lo, again.hi) == (res.lo, res.hi)
