"""Time conversions. Cassandra timestamps are naive UTC datetimes in the driver."""

from __future__ import annotations

import datetime as dt
import time

from ..store import faults

TIMER_SLOT_SECONDS = 1
# The invisibility pointer never passes slots younger than this, so a timer written "now" by a
# client whose clock is a little behind still lands in a slot that is scanned.
TIMER_SETTLE_SLOTS = 5
# The most the clocks of clients and Cassandra nodes may be apart (seconds): the one clock
# condition of delivery (docs/internals/protocol.md, Conditions). A timer write is checked
# against it (``timers.in_time``), and two deliveries of one group overlap by at most it.
CLOCK_SPREAD = 4.0


def now() -> float:
    """This process's wall clock, epoch seconds. Tests skew it through the fault seam to show
    what a client or driver whose clock is off does to the protocol."""
    return time.time() + faults.state.skew


def utcnow() -> dt.datetime:
    return from_epoch(now())


def to_epoch(value: dt.datetime | None) -> float:
    if value is None:
        return 0.0
    return value.replace(tzinfo=dt.timezone.utc).timestamp()


def from_epoch(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).replace(tzinfo=None)


def timer_slot(ts: float) -> int:
    return int(ts // TIMER_SLOT_SECONDS)
