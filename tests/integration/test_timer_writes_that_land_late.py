"""A timer written after every timer path passed its slot never leaves a message to no one.

A claim, a visibility change (also to 0), a give-back (``give_back`` of a client, and a
withheld claim's) writes its timer into the slot of its due time, counted from the start of
its call. The writer is held at the fault seam's point ``timers.before_write`` (an action there
holds only the writing thread) while the rest of the world moves on: the process clock moves
ahead, as every clock does during a long pause or a slow request, and the invisibility pointer
moves as far as a timer path with nothing due moves it, past the slot of the held write. Then
the write lands. Each message must be delivered again, once, its group's next message after
it; the queue drains, and repair reclaims the bucket up to the reader pointer.

The stream case holds the writer for real seconds while a streaming query (its driver side run
in this process) plans batches whose timer windows pass the slot; the stream must deliver the
message once the write lands.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from cassieq_spark.engine.core import clock, pointers, timers
from cassieq_spark.engine.core.clock import TIMER_SETTLE_SLOTS, timer_slot
from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration]

HELD = 16.0  # how far the world moves on while the writer is held: past any due slot + settle
VT = 1.0
BUCKET = 4  # ids per bucket: the test's messages fill one, which repair must reclaim
POLL_SECONDS = 3.0


@pytest.fixture(autouse=True)
def _faults():
    faults.reset()
    yield
    faults.reset()


class HeldTimerWrite:
    """At the timer write number ``skip + 1`` of the calling thread: move every clock ahead by
    :data:`HELD` seconds and the invisibility pointer to where a timer path then moves it,
    past the slot the write goes to; then let the write go."""

    def __init__(self, q, queue: str, skip: int = 0):
        self.q = q
        self.queue = queue
        self.skip = skip
        self.slot: int | None = None
        self.pointer: int | None = None
        self._thread = threading.current_thread()
        faults.on(timers.BEFORE_WRITE, self._hold)

    def _hold(self, queue, due: float, ids: list[int]) -> None:
        if threading.current_thread() is not self._thread or self.slot is not None:
            return
        if self.skip:
            self.skip -= 1
            return
        self.slot = timer_slot(due)
        faults.set_skew(faults.state.skew + HELD)
        target = timer_slot(clock.now()) - TIMER_SETTLE_SLOTS
        assert target > self.slot
        pointers.advance(self.q.conn, queue, "timer_slot", target)
        self.pointer = target

    def check(self) -> None:
        assert self.slot is not None, "no timer write was held"
        info = self.q.get_queue(self.queue)
        assert pointers.read(self.q.conn, info).timer_slot > self.slot  # passed before it landed


def _poll(get, seconds: float = POLL_SECONDS):
    deadline = time.monotonic() + seconds
    while (got := get()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def _drain_and_reclaim(q, queue: str, ids: list[int], ordered: bool, counts: dict) -> None:
    """Every message of ``ids`` delivered once (in that order if ``ordered``: a group's head
    first) with the delivery count ``counts`` says (1 if not named), and acked; then the
    queue is empty and repair reclaims every bucket behind the reader pointer."""
    # The world moves on past a late change's due time (timers.LATE_DELAY at most).
    faults.set_skew(faults.state.skew + timers.LATE_DELAY + 1)
    delivered: list[int] = []
    while len(delivered) < len(ids):
        got = _poll(lambda: q.get(queue, visibility_timeout=30))
        assert got is not None, f"never delivered again: {sorted(set(ids) - set(delivered))}"
        assert got.delivery_count == counts.get(got.id, 1), got
        assert q.ack(queue, got.pop_receipt)
        delivered.append(got.id)
    assert delivered == ids if ordered else sorted(delivered) == sorted(ids)
    assert q.get(queue) is None
    st = q.stats(queue)
    assert st["backlog"] == 0 and st["in_flight"] == 0, st
    q.repair(queue)
    st = q.stats(queue)
    assert st["repair_pointer"] == st["reader_pointer"] // BUCKET >= 1, st


CALLS = [
    "get",
    "get_many",
    "change_visibility",
    "change_visibility_0",
    "give_back",
    "withheld_claim",
]


@pytest.mark.parametrize("grouped", [False, True], ids=["ungrouped", "grouped"])
@pytest.mark.parametrize("call", CALLS)
def test_a_timer_write_that_lands_behind_the_invisibility_pointer_strands_nothing(
    queue_client, queue_name, call, grouped
):
    q = queue_client
    q.create_queue(queue_name, bucket_size=BUCKET, repair_timeout=60)
    ids = q.put_many(queue_name, [b"a", b"b", b"c", b"d"], group="acct-1" if grouped else None)
    first = ids[0]
    counts: dict[int, int] = {}
    if call in ("get", "get_many"):
        held = HeldTimerWrite(q, queue_name)
        if call == "get":
            assert q.get(queue_name, visibility_timeout=VT) is None
        else:
            assert q.get_many(queue_name, max_messages=10, visibility_timeout=VT) == []
    elif call == "withheld_claim":
        held = HeldTimerWrite(q, queue_name, skip=1)  # the claim's timer lands in time

        def slow(**_context) -> None:  # the claim itself then outlasts its visibility timeout
            faults.state.points.pop("consumer.before_claim", None)
            faults.set_skew(faults.state.skew + VT + 0.5)

        faults.on("consumer.before_claim", slow)
        assert q.get(queue_name, visibility_timeout=VT) is None
    else:
        m = q.get(queue_name, visibility_timeout=60)
        assert m is not None and m.id == first
        held = HeldTimerWrite(q, queue_name)
        if call == "change_visibility":
            q.change_visibility(queue_name, m.pop_receipt, 2)
            counts[first] = 2
        elif call == "change_visibility_0":
            q.change_visibility(queue_name, m.pop_receipt, 0)
            counts[first] = 2
        else:
            assert q.give_back(queue_name, [m]) == 1
    held.check()
    _drain_and_reclaim(q, queue_name, ids, grouped, counts)


def test_the_stream_delivers_a_message_whose_visibility_change_landed_behind_its_window(
    queue_client, queue_name, drivers
):
    """A client releases a message it holds (``change_visibility(..., 0)``) while a streaming
    query has taken the queue; the release is held until the stream's timer windows have
    passed the release's slot. The stream delivers the message, once."""
    q = queue_client
    q.create_queue(queue_name, repair_timeout=60)
    mid = q.put(queue_name, b"m")
    m = q.get(queue_name, visibility_timeout=60)
    assert m is not None
    d = drivers(queue_name, consumerId="late-release")
    d.start()
    held: list[int] = []
    others: list[int] = []
    caller = threading.current_thread()

    def run_the_stream(queue, due: float, ids: list[int]) -> None:
        if threading.current_thread() is not caller or held:
            return
        held.append(timer_slot(due))
        # The stream's window starts TIMER_SETTLE_SLOTS before its last batch's time: past
        # the slot once a batch is planned that long after it.
        # Another producer keeps it busy: a batch is planned only when there is something new.
        deadline = time.monotonic() + TIMER_SETTLE_SLOTS + 1.5
        while time.monotonic() < deadline:
            others.append(q.put(queue_name, b"other"))
            d.batch()
            d.commit()
            time.sleep(0.2)

    faults.on(timers.BEFORE_WRITE, run_the_stream)
    q.change_visibility(queue_name, m.pop_receipt, 0)
    assert held, "the release's timer write was not held"
    faults.reset()
    deadline = time.monotonic() + timers.LATE_DELAY + 4
    while mid not in d.delivered and time.monotonic() < deadline:
        d.batch()
        d.commit()
        time.sleep(0.2)
    d.drain()
    assert d.delivered == Counter(dict.fromkeys([mid, *others], 1))
