"""A put's plain close whose reply is lost, or that lands late, against readers and repair
(docs/internals/protocol.md, "Closing a block"): forced through the fault seam against the
real Cassandra, with counted results. They do not run under the ``lost-reply`` fault mode:
there every compare-and-set's reply is lost too, and the retry's read-back takes a missing row
for its own close, which hides the first case.

* A plain close whose delete applied but whose reply came back only after half the repair
  timeout (as a driver's request timeout does: 20 s against a 15 s repair timeout by
  default) is retried as a compare-and-set; that retry finds its own close, and the put
  writes nothing again, with or without a deduplication id.
* A plain close decided in time but landing after a reader handed the block to repair: the
  put does not report its rows as closed; a grouped message is copied before the put
  returns, in its place in the group, and delivered once under the id the put returned.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cassieq_spark.engine.store import faults
from cassieq_spark.engine.upkeep.ranges import skipped_ranges

pytestmark = [pytest.mark.integration]

PLAIN_CLOSE = r"^DELETE FROM \S+\.monoton USING TIMESTAMP"
REPAIR_TIMEOUT = 1.0
# A message row as the seam sees it: its text, or, for rows sent as an encoded batch, "BATCH".
ROW_WRITE = r"^(BATCH$|INSERT INTO \S+\.messages )"
# Past half the repair timeout: the retry of the close is a compare-and-set.
LATE_REPLY = REPAIR_TIMEOUT * 0.6


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def drain(client, queue: str) -> list:
    """Every message still to deliver, in delivery order, acked."""
    got = []
    empty = 0
    while empty < 3:
        msg = client.get(queue, visibility_timeout=30)
        if msg is None:
            empty += 1
            time.sleep(0.2)
            continue
        empty = 0
        got.append(msg)
        assert client.ack(queue, msg.pop_receipt)
    return got


def test_a_plain_close_whose_reply_is_lost_past_half_the_repair_timeout_writes_nothing_twice(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, repair_timeout=REPAIR_TIMEOUT)
    lost = faults.inject(faults.LOST_REPLY, PLAIN_CLOSE, times=1, wait=LATE_REPLY)
    ids = q.put_many(queue_name, [b"m0", b"m1", b"m2"])
    assert lost.hits == 1
    delivered = drain(q, queue_name)
    assert Counter(m.payload for m in delivered) == Counter({b"m0": 1, b"m1": 1, b"m2": 1})
    assert sorted(m.id for m in delivered) == ids, "delivered under the ids the put returned"
    assert q.stats(queue_name)["enqueued"] == 3


@pytest.mark.parametrize(
    "statement",
    [PLAIN_CLOSE, ROW_WRITE, r"^UPDATE \S+\.counters SET enqueued"],
    ids=["close", "row", "count"],
)
def test_a_deduplicated_put_whose_plain_write_reply_is_lost_late_enqueues_one_message(
    queue_client, queue_name, statement
):
    """The producer retries the put until it returns an id (a lost row reply makes it raise:
    the put rolls its block back), then once more; one message, under that id."""
    q = queue_client
    q.create_queue(queue_name, repair_timeout=REPAIR_TIMEOUT)
    lost = faults.inject(faults.LOST_REPLY, statement, times=1, wait=LATE_REPLY)
    first = None
    for _attempt in range(3):
        try:
            first = q.put(queue_name, b"once", dedup_id="order-1")
            break
        except Exception:  # noqa: BLE001, S112 - what a producer does after a timeout
            continue
    assert lost.hits == 1 and first is not None
    assert q.put(queue_name, b"once", dedup_id="order-1") == first
    assert [(m.id, m.payload) for m in drain(q, queue_name)] == [(first, b"once")]


def test_a_grouped_put_whose_close_lands_after_a_readers_skip_is_copied_in_its_place(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30, repair_timeout=REPAIR_TIMEOUT)
    reader = q.sibling()

    def land_after_a_skip(**_context) -> None:
        faults.state.points.pop("monoton.before_plain_close", None)  # this close only
        time.sleep(REPAIR_TIMEOUT * 1.3)  # decided plain in time; the delete is held up
        assert reader.get(queue_name) is None  # the reader hands the block to repair
        assert skipped_ranges(q.conn, q.get_queue(queue_name))

    faults.on("monoton.before_plain_close", land_after_a_skip)
    first = q.put(queue_name, b"first", group="g")
    second = q.put(queue_name, b"second", group="g")
    delivered = drain(q, queue_name)
    assert [(m.payload, m.id) for m in delivered] == [(b"first", first), (b"second", second)]
    # Repair owns the range and finds the copy made: nothing is delivered twice.
    time.sleep(REPAIR_TIMEOUT * 1.1)
    q.repair(queue_name, repair_timeout=REPAIR_TIMEOUT)
    assert drain(q, queue_name) == []
