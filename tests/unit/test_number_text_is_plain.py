"""Numbers given as text are read from ASCII digits without '_': Python's ``float`` and
``int`` read '1_5' as 15 and '١٥' as 15, so `get --wait 1_5` used to wait 15 s and
`stats --interval 0_5` to refresh every 5 s without a word. Each is a one-line error (exit 2)
naming the flag or option, before any connection."""

from __future__ import annotations

import pytest
from support.cli_run import NOWHERE, run_main

from cassieq_spark import cli
from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.options import parse_source_settings
from cassieq_spark.validate import float_option, int_option, seconds, watch_interval

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "row, argv, flag",
    [
        ("N66", ["get", "cempty", "--wait", "1_5"], "--wait"),
        ("N115", ["stats", "wq", "--watch", "--interval", "0_5", "--count", "2"], "--interval"),
        ("N66-arabic", ["get", "cempty", "--wait", "١٥"], "--wait"),
        ("N66-delay", ["put", "q", "m", "--delay", "1_0"], "--delay"),
        ("N66-vt", ["get", "q", "--visibility-timeout", "3_0"], "--visibility-timeout"),
        ("N66-limit", ["peek", "q", "--limit", "1_0"], "--limit"),
        ("N66-max", ["move", "q", "--to", "r", "--max", "1_000"], "--max"),
    ],
)
def test_digit_grouping_is_refused_on_the_command_line(
    row: str, argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(cli.main, NOWHERE + argv, capsys)
    assert code == 2, (code, err)
    assert flag in err[-1] and "ASCII digits" in err[-1], err


@pytest.mark.parametrize("text", ["1_5", "١٥", "1_0e1"])
def test_library_number_checks_refuse_digit_grouping(text: str) -> None:
    for check in (
        lambda: seconds(text, "wait"),
        lambda: watch_interval(text),
        lambda: float_option(text, "maxTriggerDelay"),
        lambda: int_option(text, "maxMessagesPerTrigger"),
    ):
        with pytest.raises(ConfigError, match="ASCII digits"):
            check()


def test_source_options_refuse_digit_grouping() -> None:
    with pytest.raises(ConfigError, match="maxMessagesPerTrigger"):
        parse_source_settings(
            {"contactPoints": "127.0.0.1", "queue": "q", "maxMessagesPerTrigger": "1_000"}
        )
    with pytest.raises(ConfigError, match="leaseTimeout"):
        parse_source_settings({"contactPoints": "127.0.0.1", "queue": "q", "leaseTimeout": "١٥s"})


def test_plain_numbers_are_still_read() -> None:
    assert seconds(" 1.5 ", "wait") == 1.5 and seconds("1e1", "wait") == 10.0
    assert watch_interval("0.5") == 0.5 and int_option("10", "n") == 10
