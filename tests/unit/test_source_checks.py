"""Checks of the source options that need more than a number (spark/source_checks.py)."""

from __future__ import annotations

import pytest

from cassieq_spark.engine.stream.start import StartingPosition
from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.options import parse_source_settings

BASE = {"queue": "q"}


def settings(**extra):
    return parse_source_settings({**BASE, **extra})


def test_starting_positions():
    assert settings().starting_position is None
    assert settings(startingPosition=" Latest ").starting_position == StartingPosition("latest")
    assert settings(startingPosition="earliest").starting_position == StartingPosition("earliest")
    assert settings(startingPosition='{"id": 12}').starting_position == StartingPosition("id", 12)
    ts = settings(startingPosition='{"timestamp": 1700000000000}').starting_position
    assert ts == StartingPosition("timestamp", 1_700_000_000_000)


@pytest.mark.parametrize("value", ["", "first", "[1]", '{"id": 1.5}', '{"id": true}', "{}"])
def test_bad_starting_positions_name_the_option_and_the_choices(value):
    with pytest.raises(ConfigError, match=r"'startingPosition' must be earliest, latest, \{"):
        settings(startingPosition=value)


def test_pacing_defaults_and_durations():
    s = settings()
    assert s.min_messages_per_trigger is None and s.max_trigger_delay == 900.0
    for text, seconds in [("15s", 15.0), ("500ms", 0.5), ("2 minutes", 120.0), ("1h", 3600.0)]:
        s = settings(minMessagesPerTrigger="10", maxTriggerDelay=text)
        assert s.min_messages_per_trigger == 10 and s.max_trigger_delay == seconds
    assert settings(minMessagesPerTrigger="5", maxTriggerDelay="7").max_trigger_delay == 7.0


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"minMessagesPerTrigger": "0"}, "minMessagesPerTrigger' must be >= 1"),
        ({"minMessagesPerTrigger": "x"}, "minMessagesPerTrigger' must be an integer"),
        (
            {"minMessagesPerTrigger": "10", "maxMessagesPerTrigger": "5"},
            r"'minMessagesPerTrigger' \(10\) must not exceed 'maxMessagesPerTrigger' \(5\)",
        ),
        ({"maxTriggerDelay": "5s"}, "'maxTriggerDelay' only applies with 'minMessagesPerTrigger'"),
        ({"minMessagesPerTrigger": "2", "maxTriggerDelay": "soon"}, "a duration such as '15s'"),
        ({"minMessagesPerTrigger": "2", "maxTriggerDelay": "5 days"}, "a duration such as"),
        ({"minMessagesPerTrigger": "2", "maxTriggerDelay": "0s"}, "longer than 0"),
    ],
)
def test_bad_pacing_options(extra, message):
    with pytest.raises(ConfigError, match=message):
        settings(**extra)


# -- which queues: queue, queues, queuePattern -------------------------------------------------


def test_queue_selections():
    one = parse_source_settings({"queue": "q"}).selection
    assert (one.kind, one.names, one.several) == ("queue", ("q",), False)
    listed = parse_source_settings({"queues": " a, b ,c"}).selection
    assert (listed.kind, listed.names, listed.several) == ("queues", ("a", "b", "c"), True)
    assert parse_source_settings({"queues": "a"}).selection.several  # a list of one: by name
    pattern = parse_source_settings({"queuePattern": "orders_.*"}).selection
    assert pattern.several and pattern.matches("orders_eu") and not pattern.matches("xorders_eu")
    assert not pattern.matches("orders")  # the whole name must match


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "option 'queue' is required.*'queues'.*'queuePattern'"),
        ({"queue": "a", "queues": "b"}, "set exactly one, got queue, queues"),
        ({"queues": "a", "queuePattern": "b"}, "set exactly one, got queues, queuePattern"),
        ({"queues": "a,,b"}, "invalid queue name in option 'queues'"),
        ({"queues": "a,b,a"}, "option 'queues' names a more than once"),
        ({"queuePattern": "(a"}, "option 'queuePattern' must be a regular expression"),
        (
            {"queues": "a,b", "startingPosition": '{"id": 4}'},
            r"'startingPosition' \{\"id\": N\} names an id of one queue",
        ),
        ({"queuePattern": "a.*", "createQueue": "true"}, "'createQueue' cannot create"),
    ],
)
def test_bad_queue_selections_name_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        parse_source_settings(options)
