"""Option ``maxBatchAttempts``: how many runs may fail a stream batch before its messages move
(``engine/stream/deliveries.py``). Never below 2, so the first replay of a batch, the usual one
after a crash once the sink wrote, is always the first attempt's rows."""

from __future__ import annotations

import uuid

import pytest

from cassieq_spark.engine.core.queues import QueueInfo
from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.options import parse_source_settings
from cassieq_spark.spark.queue_stream import QueueStream


def _attempts(max_delivery_count: int, **options) -> int:
    """What the partitions of a batch carry, for a queue with this max_delivery_count."""
    settings = parse_source_settings({"queue": "q", **options})
    stream = QueueStream.__new__(QueueStream)  # no connection: only the settings are read
    stream.settings = settings
    stream.queue = QueueInfo("q", uuid.uuid4(), max_delivery_count=max_delivery_count)
    return stream.max_batch_attempts


def test_the_default_follows_the_queue_but_never_below_two():
    assert _attempts(5) == 5
    assert _attempts(2) == 2
    assert _attempts(1) == 2  # a client's "no retry" still lets one replay through unchanged


def test_the_option_overrides_the_queue():
    assert _attempts(1, maxBatchAttempts="7") == 7
    assert _attempts(9, maxBatchAttempts=" 2 ") == 2


@pytest.mark.parametrize("value", ["1", "0", "-3", "two", "true"])
def test_bad_values_name_the_option(value):
    with pytest.raises(ConfigError, match="'maxBatchAttempts' must be"):
        parse_source_settings({"queue": "q", "maxBatchAttempts": value})
