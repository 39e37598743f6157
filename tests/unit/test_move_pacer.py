"""The rate limit of batch moves: batches cut to a second's worth, and a pause before each
batch that would go past the rate."""

from __future__ import annotations

import pytest

from cassieq_spark.engine.upkeep.batch_moves import Pacer
from cassieq_spark.errors import ConfigError


def test_a_pacer_cuts_batches_to_its_rate_and_waits_for_the_units_done():
    slept: list[float] = []
    pacer = Pacer(100.0, sleep=slept.append)
    assert pacer.cap(500) == 100 and pacer.cap(7) == 7
    pacer.wait(0)
    assert slept == []
    pacer.wait(300)  # 300 done at 100 a second: about three seconds from the start
    assert len(slept) == 1 and 2.5 < slept[0] <= 3.0


def test_no_rate_means_no_pause_and_whole_batches():
    slept: list[float] = []
    pacer = Pacer(None, sleep=slept.append)
    pacer.wait(10**9)
    assert pacer.cap(1000) == 1000 and slept == []


@pytest.mark.parametrize("rate", [0, -1.0])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(ConfigError, match="positive number of messages per second"):
        Pacer(rate)
