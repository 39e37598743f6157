"""The limits of batch receive and acknowledgement, without a server."""

from __future__ import annotations

import math

import pytest

from cassieq_spark.cli import build_parser, check_args
from cassieq_spark.engine.consume.batch_ack import receipts_list, visibility_pairs
from cassieq_spark.errors import ConfigError
from cassieq_spark.validate import MAX_BATCH, MAX_WAIT_SECONDS, max_messages, wait_seconds


@pytest.mark.parametrize("value", [1, 10, MAX_BATCH])
def test_max_messages_accepts_1_to_1000(value):
    assert max_messages(value) == value


@pytest.mark.parametrize("value", [0, -1, MAX_BATCH + 1, 2.0, True, "5", None])
def test_max_messages_refuses_the_rest_naming_the_argument(value):
    with pytest.raises(ConfigError, match=r"^max_messages must be an integer from 1 to 1000"):
        max_messages(value)


@pytest.mark.parametrize("value", [0, 0.5, "3", MAX_WAIT_SECONDS])
def test_wait_seconds_accepts_0_to_20(value):
    assert wait_seconds(value) == float(value)


@pytest.mark.parametrize("value", [-1, 20.001, math.inf, math.nan, True, "soon"])
def test_wait_seconds_refuses_the_rest_naming_the_argument(value):
    with pytest.raises(ConfigError, match=r"^wait_seconds must be"):
        wait_seconds(value)


def test_receipts_and_pairs():
    assert receipts_list(("a", "b"), "pop_receipts", "receipts") == ["a", "b"]
    with pytest.raises(ConfigError, match="pop_receipts must be a list of receipts, got str"):
        receipts_list("abc", "pop_receipts", "receipts")
    with pytest.raises(ConfigError, match="at most 1000 per call"):
        receipts_list(["a"] * 1001, "pop_receipts", "receipts")
    assert visibility_pairs([("a", "0"), ["b", 2]]) == [("a", 0.0), ("b", 2.0)]
    with pytest.raises(ConfigError, match=r"entries\[0\] timeout must be a finite number"):
        visibility_pairs([("a", -1)])
    with pytest.raises(ConfigError, match=r"entries\[1\] must be a \(receipt, timeout\) pair"):
        visibility_pairs([("a", 1), ("b", 1, 2)])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["get", "q", "--max", "0"], "--max must be an integer from 1 to 1000, got 0"),
        (["get", "q", "--max", "1.5"], "--max must be an integer from 1 to 1000"),
        (["get", "q", "--wait", "-2"], "--wait must be a finite number of seconds >= 0"),
        (["get", "q", "--wait", "30"], "--wait must be at most 20 seconds"),
    ],
)
def test_cli_checks_max_and_wait_before_connecting(argv, message):
    args = build_parser().parse_args(argv)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        check_args(args)


def test_cli_get_without_max_keeps_its_single_message_form():
    args = build_parser().parse_args(["get", "q"])
    check_args(args)
    assert (args.max, args.wait) == (None, None)
    args = build_parser().parse_args(["get", "q", "--max", "7", "--wait", "2.5"])
    check_args(args)
    assert (args.max, args.wait) == (7, 2.5)
