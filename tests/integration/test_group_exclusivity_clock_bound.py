"""Group exclusivity holds up to the spread between the consumers' clocks, and no further.

A visibility timeout ends on the clock of the consumer that looks next: a consumer whose clock
runs ``s`` seconds ahead of the holder's takes the group's head again ``s`` seconds before the
holder's window ends (and, once it acks it, the group's next message). So two deliveries of one
group overlap by at most ``s``, which the clock condition bounds by ``CLOCK_SPREAD``
(docs/groups.md, docs/internals/protocol.md). The next consumer's clock is this process's,
skewed through the fault seam after the holder's claim.
"""

from __future__ import annotations

import time

import pytest

from cassieq_spark.engine.core.clock import CLOCK_SPREAD
from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration]

VT = 2.0


@pytest.fixture(autouse=True)
def _faults():
    faults.reset()
    yield
    faults.reset()


@pytest.mark.parametrize("ahead", [0.0, CLOCK_SPREAD / 2])
def test_group_exclusivity_holds_up_to_the_spread_of_consumer_clocks(
    queue_client, queue_name, ahead
):
    q = queue_client
    q.create_queue(queue_name)
    head, after = q.put_many(queue_name, [b"head", b"next"], group="acct-1")
    before_claim = time.time()
    held = q.get(queue_name, visibility_timeout=VT)  # the holder, on the true clock
    assert held is not None and held.id == head
    holder_window_ends = before_claim + VT  # at the earliest, on the true clock
    faults.set_skew(ahead)  # the next consumer's clock
    while True:
        started = time.time()
        got = q.get(queue_name, visibility_timeout=30)
        if got is not None:
            break
        assert started < holder_window_ends + 10, "the head never came back"
        time.sleep(0.05)
    assert got.id == head  # never the group's next message while its head is held
    overlap = holder_window_ends - started
    assert overlap <= ahead  # the bound: the clocks' spread
    assert q.ack(queue_name, got.pop_receipt)
    nxt = q.get(queue_name, visibility_timeout=30)
    assert nxt is not None and nxt.id == after
