"""Protocol findings about ids, reservations and the horizon (F1, F5, F9, F10, F16, F20),
each forced deterministically through the fault seam against the real Cassandra.

Every test here failed on 45e5919; its docstring says what that code did.
"""

from __future__ import annotations

import time
import uuid

import pytest
from cassandra import WriteTimeout

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.counters import Counters
from cassieq_spark.engine.core.messages import read_range, write_messages
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.store.schema import SENTINEL_LO
from cassieq_spark.engine.write import producer
from cassieq_spark.errors import QueueNotFoundError

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]

KEY_INSERT = r"INSERT INTO \S*reservation_keys"


@pytest.fixture(autouse=True)
def _clean_faults():
    faults.reset()
    yield
    faults.reset()


def _queue(client, name, **settings):
    settings.setdefault("repair_timeout", 30)
    client.create_queue(name, **settings)
    return client.get_queue(name)


def _stored_ids(client, q, lo, hi):
    return [r.id for r in read_range(client.conn, q, lo, hi, "id, dead") if not r.dead]


@pytest.mark.parametrize("mode", [faults.RETRIED, faults.LOST_REPLY])
def test_retried_key_insert_keeps_the_chunk(queue_client, queue_name, mode):
    """F1: the driver re-sent the key's INSERT .. IF NOT EXISTS after its first copy applied
    (or the reply was lost). On 45e5919 (by reading, and the review's scenario) the second
    result said "not applied", reserve_keyed took its own key for another attempt's, closed
    the block as released and returned closed=True: the keyed enqueue wrote nothing and
    reported the ids as enqueued (a whole chunk lost)."""
    q = _queue(queue_client, queue_name)
    faults.inject(mode, KEY_INSERT)
    ids = producer.enqueue(
        queue_client.conn,
        Counters(queue_client.conn),
        q,
        [f"m{i}".encode() for i in range(10)],
        key="f1:chunk",
    )
    assert len(ids) == 10
    assert _stored_ids(queue_client, q, ids[0], ids[-1] + 1) == ids
    got = []
    while (m := queue_client.get(queue_name)) is not None:
        got.append(m.id)
        queue_client.ack(queue_name, m.pop_receipt)
    assert sorted(got) == ids


def test_reserve_sent_twice_leaves_no_block_open(queue_client, queue_name):
    """F1 (secondary): the reservation batch applied, then the driver re-sent it and got "not
    applied". On 45e5919 (by reading) reserve took a second block and left the first open
    forever: readers stalled for the repair timeout, then repair counted it as lost."""
    q = _queue(queue_client, queue_name)
    faults.inject(faults.RETRIED, r"BEGIN BATCH")
    res = monoton.reserve(queue_client.conn, q, 5)
    assert (res.lo, res.hi) == (0, 5)
    assert monoton.close(queue_client.conn, q, res).result() is True
    hz = monoton.horizon(queue_client.conn, q, 0)
    assert hz.open_count == 0 and hz.next_id == 5 and hz.safe_end == 5


def test_conditional_statements_are_never_resent():
    """F1 (policy): the driver's default RetryPolicy re-sends any statement after a request
    error, conditional ones included (45e5919 set no policy). Now only idempotent ones are."""
    from cassandra.policies import RetryPolicy

    from cassieq_spark.engine.store.session import QueueRetryPolicy, is_idempotent

    class Stmt:
        def __init__(self, idempotent):
            self.is_idempotent = idempotent

    policy = QueueRetryPolicy()
    lwt = "UPDATE {ks}.pointers SET reader = ? WHERE queue_id = ? IF reader < ?"
    counter = "UPDATE {ks}.counters SET acked = acked + ? WHERE queue_id = ?"
    plain = "INSERT INTO {ks}.timers (queue_id, slot, id) VALUES (?, ?, ?)"
    assert not is_idempotent(lwt) and not is_idempotent(counter) and is_idempotent(plain)
    error = ConnectionError("connection reset")
    assert policy.on_request_error(Stmt(False), 6, error, 0)[0] == RetryPolicy.RETHROW
    assert policy.on_request_error(Stmt(True), 6, error, 0)[0] == RetryPolicy.RETRY_NEXT_HOST
    from cassandra.policies import WriteType

    assert policy.on_write_timeout(Stmt(False), 6, WriteType.CAS, 2, 0, 0)[0] == RetryPolicy.RETHROW
    assert policy.on_write_timeout(Stmt(True), 6, WriteType.SIMPLE, 2, 0, 0)[0] == RetryPolicy.RETRY


def test_prepared_statements_carry_their_idempotence(queue_client):
    conn = queue_client.conn
    assert conn.prepare("SELECT reader FROM {ks}.pointers WHERE queue_id = ?").is_idempotent
    assert not conn.prepare(
        "UPDATE {ks}.pointers SET reader = ? WHERE queue_id = ? IF reader < ?"
    ).is_idempotent


def test_horizon_never_passes_a_reservation_made_during_its_reads(queue_client, queue_name):
    """F5: on a new queue the range read returns no rows (and so no static `next`); 45e5919
    then read `next` separately and used it as the end, passing a reservation made between
    the two reads while it was still open (by reading: it returned safe_end 10 here; that
    the empty range read returns no `next` was verified with a trace). Reads are windowed here, as client get() does."""
    q = _queue(queue_client, queue_name)
    conn = queue_client.conn
    made = []
    faults.on(
        "monoton.horizon_no_rows",
        lambda queue: made or made.append(monoton.reserve(conn, q, 10)),
    )
    hz = monoton.horizon(conn, q, 0, window=4096)
    assert made and hz.safe_end == 0 and hz.open_count == 1
    # A client polling the empty queue must not move its pointer past the open block either.
    assert queue_client.get(queue_name) is None
    write_messages(conn, q, 0, [b"late"] * 10)
    monoton.close(conn, q, made[0]).result()
    got = [queue_client.get(queue_name) for _ in range(10)]
    assert sorted(m.id for m in got if m) == list(range(10))


def test_skewed_creator_cannot_shadow_the_counter(queue_client, queue_name):
    """F9: create_queue wrote `monoton.next = 0` and the pointers row with the driver's client
    timestamp; a creator whose clock runs ahead shadows the reservations' compare-and-sets
    (ballot timestamps). On 45e5919 (by reading; the review's scenario) two reservations after
    such a creation both got lo 0 and the reader pointer read back 0 after a move. Now the
    initial rows are stamped 1, whatever the creator's clock says."""
    conn = queue_client.conn
    real = conn.cluster.timestamp_generator
    conn.cluster.timestamp_generator = lambda: int((time.time() + 30) * 1_000_000)
    try:
        q = _queue(queue_client, queue_name)
    finally:
        conn.cluster.timestamp_generator = real
    a = monoton.reserve(conn, q, 5)
    monoton.forget_counter_seen(q.queue_id)  # a second writer that has to read the counter
    b = monoton.reserve(conn, q, 5)
    assert (a.lo, b.lo) == (0, 5)
    from cassieq_spark.engine.core import pointers

    assert pointers.advance(conn, q, "reader", 3) is True
    assert pointers.read(conn, q).reader == 3


@pytest.mark.parametrize("late", [False, True], ids=["plain close", "compare-and-set close"])
def test_closed_reservation_never_reopens(queue_client, queue_name, late):
    """F10: the late (compare-and-set) close put a TTL on `closed` only, while the row lived
    14 days: once `closed` expired the block read as open and abandoned, and was republished
    (duplicates). Now a close deletes the row: past the repair timeout, a reader sees nothing
    open or abandoned there, its skip of the block does not apply, and repair has nothing to
    republish. Any close that leaves the block readable as open fails here."""
    q = _queue(queue_client, queue_name, repair_timeout=1)
    conn = queue_client.conn
    res = monoton.reserve(conn, q, 5)
    write_messages(conn, q, res.lo, [b"x"] * 5)
    if late:
        time.sleep(0.6)  # past half the repair timeout: the close is the compare-and-set kind
    assert monoton.close(conn, q, res).result() is True
    time.sleep(1.2)  # past the repair timeout: an open block would now be abandoned
    hz = monoton.horizon(conn, q, 0)
    assert hz.abandoned == () and hz.safe_end == 5 and hz.open_count == 0
    assert monoton.skip(conn, q, res.lo, res.hi) is monoton.Handed.CLOSED
    report = queue_client.repair(queue_name)
    assert report.republished == 0 and report.lost_ids == 0


def test_reading_the_counter_walks_no_tombstones(queue_client, queue_name):
    """F16: `SELECT next ... LIMIT 1` has no clustering restriction, so Cassandra walks the
    partition from its first row: every closed reservation's tombstone (or expired cells on
    45e5919). Measured before the fix with this test's trace: one tombstone per closed
    reservation ("Read 1 live rows and 1500 tombstone cells" after 1,500). The counter is now
    read through the sentinel row. 300 closed reservations (one serial compare-and-set each)
    are 30 times the bound asserted."""
    q = _queue(queue_client, queue_name)
    conn = queue_client.conn
    n = 300
    for _ in range(n):
        monoton.close(conn, q, monoton.reserve(conn, q, 1)).result()
    stmt = conn.prepare("SELECT next, lo FROM {ks}.monoton WHERE queue_id = ? AND lo = ?")
    rs = conn.session.execute(stmt, (q.queue_id, SENTINEL_LO), trace=True)
    assert rs.one().next == n
    assert monoton.counter(conn, q) == n
    trace = rs.get_query_trace(max_wait_sec=10)
    read = [e.description for e in trace.events if "tombstone" in e.description]
    walked = sum(int(d.split(" and ")[1].split()[0]) for d in read if " and " in d)
    assert walked < 10, read


def test_create_queue_is_all_or_nothing(queue_client, queue_name):
    """F20: the queue row went in first, then pointers and `monoton.next` by plain writes. On
    45e5919 (the review's scenario, by reading) a failure after the queue row left a queue
    whose reservations never applied (`put` raised ContentionError after 200 attempts) and
    that create_queue(exist_ok=True) returned as it was. Now the incarnation's rows go first."""
    faults.inject(faults.TIMEOUT_BEFORE, r"INSERT INTO \S*pointers")
    with pytest.raises(WriteTimeout):
        queue_client.create_queue(queue_name)
    with pytest.raises(QueueNotFoundError):
        queue_client.get_queue(queue_name)
    queue_client.create_queue(queue_name, exist_ok=True)
    mid = queue_client.put(queue_name, b"hello")
    m = queue_client.get(queue_name)
    assert m is not None and m.id == mid and m.payload == b"hello"


def test_queue_from_before_the_sentinel_still_works(queue_client):
    """Queues made by earlier versions have no sentinel row: the first read of the counter
    adds it."""
    conn = queue_client.conn
    name = f"t_{uuid.uuid4().hex[:12]}"
    q = _queue(queue_client, name)
    conn.execute(
        "DELETE FROM {ks}.monoton WHERE queue_id = ? AND lo = ?", (q.queue_id, SENTINEL_LO)
    )
    conn.execute("UPDATE {ks}.monoton SET next = 0 WHERE queue_id = ?", (q.queue_id,))
    monoton.forget_counter_seen(q.queue_id)
    ids = queue_client.put_many(name, [b"a", b"b"])
    assert ids == [0, 1]
    assert monoton.counter(conn, q) == 2
