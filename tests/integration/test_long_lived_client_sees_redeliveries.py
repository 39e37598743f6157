"""A long-lived client keeps receiving messages whose deliveries it lost track of.

What a client remembers between calls (its reader cache, its memo of due timers and of the
deliveries it holds, the slot markers it wrote) is a hint: when a delivery went wrong for it
(the claim applied but the call failed before it could return the message, or the claim's
outcome was read back as not applied), the message must come back to that very client once
its visibility timeout ends, as soon as it would to a client with nothing cached. A fresh
client on the same connection is the control.

The failures are forced through the fault seam against the real Cassandra: a timeout of the
body read that follows a claim (the claim applied, the call fails: the client never sees the
message), a claim whose statement never ran (its reply "lost", read back as not applied), and
a claim that lands late: its timers written first, its compare-and-set applied only after the
timer path of the long-lived client read the rows still fresh in the timer's slot (what a
claim request queued at a loaded coordinator does, after its client timed out and read the
row back as "not applied"). Every id is counted: each comes back to the long-lived client,
once, within a bounded time.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest

from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration]

VT = 1.5  # seconds: short, so that several lost deliveries fit in a few seconds
N = 3
BOUND = 2 * VT + 3.0  # after the last failed call: visibility + the timer settle + polling

BODIES_AFTER_BATCH_CLAIM = r"^SELECT id, payload, headers, enqueued_at FROM .* id IN"
BODY_AFTER_CLAIM = r"^SELECT payload, headers, enqueued_at FROM"
BATCH_CLAIM = r"IF version = null AND acked = null AND dead = null"
SINGLE_CLAIM = r"^UPDATE .*messages USING TTL \? SET version = \?, deliveries = \?"


@pytest.fixture(autouse=True)
def _clean_faults():
    faults.reset()
    yield
    faults.reset()


def _receive_all(client, queue: str, ids: set[int], bound: float) -> tuple[dict, float]:
    """Poll ``client`` until every id of ``ids`` came (or ``bound`` seconds passed); each
    message is acked. Returns {id: delivery_count} counted per id, and the seconds it took."""
    got: collections.Counter = collections.Counter()
    counts: dict[int, int] = {}
    start = time.monotonic()
    while set(got) < ids and time.monotonic() - start < bound:
        for m in client.get_many(queue, max_messages=10, visibility_timeout=VT, wait_seconds=0.5):
            got[m.id] += 1
            counts[m.id] = m.delivery_count
            client.ack(queue, m.pop_receipt)
    assert all(n == 1 for n in got.values()), f"delivered more than once: {dict(got)}"
    return counts, time.monotonic() - start


def _fail_deliveries(client, queue: str, rounds: int, pattern: str, mode: str) -> int:
    """Make ``rounds`` calls of ``client`` whose delivery goes wrong (``mode`` on the first
    statement matching ``pattern``), each after the previous delivery's visibility ended;
    returns how many calls raised."""
    raised = 0
    for _ in range(rounds):
        deadline = time.monotonic() + 2 * VT + 3.0
        rule = faults.inject(mode, pattern, times=1)
        while rule.hits == 0 and time.monotonic() < deadline:
            try:
                client.get_many(queue, max_messages=10, visibility_timeout=VT)
            except Exception:  # the injected timeout: what a loaded machine's client sees
                raised += 1
                continue
            time.sleep(0.1)  # what it received is not acked: it comes back too
        assert rule.hits == 1, "the delivery to fail never came"
        faults.reset()
    return raised


@pytest.mark.parametrize(
    "first, later, mode",
    [
        pytest.param(
            BODIES_AFTER_BATCH_CLAIM,
            BODY_AFTER_CLAIM,
            faults.TIMEOUT_BEFORE,
            id="applied-call-failed",
        ),
        pytest.param(BATCH_CLAIM, SINGLE_CLAIM, faults.TIMEOUT_BEFORE, id="claim-not-applied"),
    ],
)
def test_long_lived_client_receives_messages_after_its_deliveries_went_wrong(
    queue_client, queue_name, first, later, mode
):
    c = queue_client.sibling()
    c.create_queue(queue_name, visibility_timeout=VT, max_delivery_count=100)
    ids = set(c.put_many(queue_name, [b"m%d" % i for i in range(N)]))
    _fail_deliveries(c, queue_name, 1, first, mode)
    _fail_deliveries(c, queue_name, 4, later, mode)
    counts, took = _receive_all(c, queue_name, ids, BOUND)
    missing = ids - set(counts)
    if missing:
        control, ctook = _receive_all(queue_client.sibling(), queue_name, missing, BOUND)
        pytest.fail(
            f"the long-lived client did not receive {sorted(missing)} in {took:.1f} s; "
            f"a fresh client received {sorted(control)} in {ctook:.2f} s"
        )
    assert took < BOUND


def test_a_claim_landing_after_the_timer_path_read_its_rows_fresh_still_brings_them_back(
    queue_client, queue_name
):
    """The timer path of a long-lived client reads a due slot whose rows are still fresh (the
    timers of a claim whose compare-and-set has not landed yet); the claim then lands, due
    already (its due time counts from its call's start). The slot holds the only timer of
    those messages: the client that saw them fresh must read them again, not leave them to
    the reader path for good (which passes claimed rows)."""
    c = queue_client.sibling()
    c.create_queue(queue_name, visibility_timeout=VT, max_delivery_count=100)
    ids = set(c.put_many(queue_name, [b"m%d" % i for i in range(N)]))
    late, long_lived = queue_client.sibling(), queue_client.sibling()
    paused, go = threading.Event(), threading.Event()
    late_result: dict = {}

    def late_claim() -> None:
        late_result["got"] = late.get_many(queue_name, max_messages=10, visibility_timeout=VT)

    late_thread = threading.Thread(target=late_claim)

    def hold_the_late_claim(**_) -> None:
        if threading.current_thread() is late_thread:
            paused.set()
            assert go.wait(30)

    faults.on("batch.before_claim", hold_the_late_claim)
    late_thread.start()
    assert paused.wait(10), "the late claim never reached its compare-and-set"
    time.sleep(VT + 1.2)  # the late claim's timer slot is due now; its rows are still fresh

    released: list[bool] = []

    def land_the_late_claim(**_) -> None:
        # Between the long-lived client's timer path (rows read fresh) and its reader path.
        if threading.current_thread() is threading.main_thread() and not released:
            released.append(True)
            go.set()
            late_thread.join(30)

    faults.on("batch.before_reader_path", land_the_late_claim)
    assert long_lived.get_many(queue_name, max_messages=10, visibility_timeout=VT) == []
    assert released and not late_thread.is_alive()
    # The claim landed, but past its visibility timeout: handed out to nobody, and given
    # back uncounted (due now, a new timer).
    assert late_result["got"] == []
    faults.reset()

    counts, took = _receive_all(long_lived, queue_name, ids, BOUND)
    missing = ids - set(counts)
    if missing:
        control, ctook = _receive_all(queue_client.sibling(), queue_name, missing, BOUND)
        pytest.fail(
            f"the long-lived client did not receive {sorted(missing)} in {took:.1f} s; "
            f"a fresh client received {sorted(control)} in {ctook:.2f} s"
        )
    assert set(counts.values()) == {1}, counts  # the late claim's delivery was not counted
