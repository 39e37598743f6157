"""A single ``put`` and ``get`` send together the statements that do not depend on each other,
and every interleaving that opens is forced here through the fault seam, against the real
Cassandra, with counted results (docs/internals/protocol.md, "Single calls in fewer round
trips").

* put: the ``enqueued`` count travels with the plain close of the block, both after the row's
  reply. One of them failing (reply lost, refused, never sent) while the other succeeds
  loses no message, delivers none twice, and counts each message once or, for a count that
  may never have applied, not at all (short, never ahead). A count a node shutting down
  refused never ran, so it is sent again and counts.
* get: the due slots, the first stretch of the scan and the timer of the row the client
  expects to claim are sent with the read of the pointers. A stretch read before another
  consumer moved the reader pointer past it is not used; a timer written ahead for a row
  another consumer took is left behind as a lost claim's is; a timer write ahead that failed
  is written again before the claim, so the message still comes back after its visibility
  timeout.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cassieq_spark.engine.consume.consumer import HEADER_ORIGIN_ID
from cassieq_spark.engine.core import pointers
from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

COUNTER = r"^UPDATE \S+\.counters SET enqueued"
CLOSE = r"^DELETE FROM \S+\.monoton USING TIMESTAMP"
TIMER = r"^INSERT INTO \S+\.timers "


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def drain(client, queue: str, vt: float = 30.0) -> Counter:
    """Every message still to deliver, acked; how many times each payload came."""
    got: Counter = Counter()
    empty = 0
    while empty < 3:
        msg = client.get(queue, visibility_timeout=vt)
        if msg is None:
            empty += 1
            time.sleep(0.2)
            continue
        empty = 0
        got[msg.payload] += 1
        assert client.ack(queue, msg.pop_receipt)
    return got


@pytest.mark.parametrize(
    "statement, mode, counted",
    [
        (COUNTER, faults.LOST_REPLY, 1),
        (COUNTER, faults.TIMEOUT_BEFORE, 0),
        (COUNTER, faults.REFUSED_BEFORE, 1),  # refused before it ran: sent again
        (CLOSE, faults.LOST_REPLY, 1),
        (CLOSE, faults.TIMEOUT_BEFORE, 1),
    ],
    ids=[
        "count-reply-lost",
        "count-never-sent",
        "count-refused",
        "close-reply-lost",
        "close-retried",
    ],
)
def test_a_put_whose_count_or_close_fails_beside_the_other_delivers_each_message_once(
    queue_client, queue_name, statement, mode, counted
):
    q = queue_client
    q.create_queue(queue_name)
    ids = [q.put(queue_name, f"m{i}".encode()) for i in range(4)]
    faults.inject(mode, statement, times=1)
    ids.append(q.put(queue_name, b"m4"))
    ids += [q.put(queue_name, f"m{i}".encode()) for i in range(5, 8)]
    assert len(set(ids)) == 8
    assert drain(q, queue_name) == Counter({f"m{i}".encode(): 1 for i in range(8)})
    # Never ahead of the messages: a count that did not apply leaves it short by one.
    assert q.stats(queue_name)["enqueued"] == 7 + counted


def test_a_put_whose_close_never_lands_beside_its_count_is_delivered_once_by_repair(
    queue_client, queue_name
):
    """Every close attempt fails while the count applied: the put raises, its row is written
    and its block stays open; readers hand the block to repair after the repair timeout and
    repair republishes the row, once. The count (sent with the first close) counted it once."""
    q = queue_client
    q.create_queue(queue_name, repair_timeout=1)
    q.put(queue_name, b"before")
    faults.inject(faults.TIMEOUT_BEFORE, CLOSE, times=3)
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver's timeout becomes
        q.put(queue_name, b"unclosed")
    q.put(queue_name, b"after")
    time.sleep(1.3)
    first = drain(q, queue_name)  # passes the abandoned block, hands it to repair
    time.sleep(1.2)  # repair waits the repair timeout after the hand-over
    q.repair(queue_name, repair_timeout=1)
    got = first + drain(q, queue_name)
    assert got == Counter({b"before": 1, b"unclosed": 1, b"after": 1})
    assert q.stats(queue_name)["enqueued"] == 3


def test_a_stretch_read_ahead_of_a_pointer_moved_past_it_is_not_delivered(queue_client, queue_name):
    """The stretch is read from where this client left the reader; then another consumer
    moves the stored pointer past rows it consumed without marking them (what the stream's
    pointer move does), before this get reads the pointers. None of those rows is handed
    out: the get starts at the stored pointer."""
    q = queue_client.sibling()
    q.create_queue(queue_name, visibility_timeout=30)
    ids = q.put_many(queue_name, [f"m{i}".encode() for i in range(10)])
    first = q.get(queue_name)
    assert first is not None and first.id == ids[0]
    info = q.get_queue(queue_name)

    def consumed_meanwhile(**_):
        time.sleep(0.2)  # the stretch sent ahead has been read by now
        pointers.advance(q.conn, info, "reader", ids[6])

    faults.on("consumer.read_ahead", consumed_meanwhile)
    msg = q.get(queue_name)
    faults.reset()
    assert msg is not None and msg.id == ids[6]
    assert q.ack(queue_name, first.pop_receipt) and q.ack(queue_name, msg.pop_receipt)
    assert drain(q, queue_name) == Counter({f"m{i}".encode(): 1 for i in range(7, 10)})


def test_a_timer_written_ahead_for_a_row_another_consumer_took_delivers_nothing_twice(
    queue_client, queue_name
):
    """Client a expects the row after the one it got; client b takes that row first. a's
    timer for it is left behind; a claims the next row. Counted over two rounds of the
    visibility timeout: each message is delivered once, acked once, and none comes back
    through the stray timer (held by b, then acked)."""
    a, b = queue_client.sibling(), queue_client.sibling()
    a.create_queue(queue_name, visibility_timeout=1)
    ids = a.put_many(queue_name, [f"m{i}".encode() for i in range(12)])
    deliveries: list[tuple[int, float]] = []  # (id, when), every delivery of the rounds
    held = {}
    for _ in range(4):
        ma = a.get(queue_name, visibility_timeout=2)  # a's next get: the next row's timer
        mb = b.get(queue_name, visibility_timeout=2)  # b takes that row
        for m in (ma, mb):
            assert m is not None
            deliveries.append((m.id, time.monotonic()))
            held[m.id] = m
    assert {m for m, _ in deliveries} == set(ids[:8])
    for m in held.values():
        assert a.ack(queue_name, m.pop_receipt)
    time.sleep(2.5)  # every timer of those deliveries, the stray ones included, is due
    rest = drain(a, queue_name, vt=1.0)
    assert rest == Counter({f"m{i}".encode(): 1 for i in range(8, 12)})
    assert Counter(m for m, _ in deliveries) == Counter(set(ids[:8]))
    assert a.stats(queue_name)["backlog"] == 0


@pytest.mark.parametrize("mode", [faults.TIMEOUT_BEFORE, faults.LOST_REPLY])
def test_a_claim_whose_timer_written_ahead_failed_still_comes_back(queue_client, queue_name, mode):
    """The timer sent ahead for the row this get claims fails (never sent, or its reply
    lost): the claim writes it again before its compare-and-set, so the delivery, never
    acked, comes back once its visibility timeout ends, once."""
    q = queue_client.sibling()
    q.create_queue(queue_name, visibility_timeout=1)
    ids = q.put_many(queue_name, [b"m0", b"m1", b"m2"])
    m0 = q.get(queue_name)
    assert m0 is not None and m0.id == ids[0] and q.ack(queue_name, m0.pop_receipt)
    faults.inject(mode, TIMER, times=1)
    m1 = q.get(queue_name, visibility_timeout=1)
    assert m1 is not None and m1.id == ids[1]
    assert not [r for r in faults.state.rules if r.hits == 0], "the timer sent ahead was hit"
    faults.reset()
    time.sleep(1.3)
    again = [q.get(queue_name, visibility_timeout=30) for _ in range(3)]
    got = Counter(m.id for m in again if m is not None)
    assert got == Counter({ids[1]: 1, ids[2]: 1})
    redelivered = next(m for m in again if m is not None and m.id == ids[1])
    assert redelivered.delivery_count == 2
    assert HEADER_ORIGIN_ID not in redelivered.headers
