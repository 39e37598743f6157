"""A timer write is in time while the writer's clock, read after the reply, is CLOCK_SPREAD
before the moment any timer path may pass the slot for the last time
(docs/internals/protocol.md, "Every timer is stored where a timer path reads it")."""

from __future__ import annotations

import math
import time

import pytest

from cassieq_spark.engine.core import timers
from cassieq_spark.engine.core.clock import CLOCK_SPREAD, TIMER_SETTLE_SLOTS
from cassieq_spark.engine.store import faults


@pytest.fixture(autouse=True)
def _faults():
    faults.reset()
    yield
    faults.reset()


def _clock_at(ts: float) -> None:
    faults.set_skew(ts - time.time())


def test_the_deadline_is_the_settle_window_past_the_slot_s_end():
    due = 1_000_000.25
    assert timers.deadline(due) == math.floor(due) + 1 + TIMER_SETTLE_SLOTS


@pytest.mark.parametrize(
    "after, in_time",
    [
        (0.0, True),
        (1.5, True),
        (TIMER_SETTLE_SLOTS + 1 - CLOCK_SPREAD - 0.3, True),
        (TIMER_SETTLE_SLOTS + 1 - CLOCK_SPREAD + 0.3, False),
        (30.0, False),
    ],
)
def test_a_write_acknowledged_later_than_the_spread_before_the_deadline_is_late(after, in_time):
    slot_start = math.floor(time.time()) + 100.0
    _clock_at(slot_start + after)
    assert timers.in_time(slot_start) is in_time
