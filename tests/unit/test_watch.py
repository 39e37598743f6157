"""The live view of `cassieq stats --watch`: rates and rows from successive samples, no server."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable, Iterator

import pytest
from rich.console import Console

from cassieq_spark import watch
from cassieq_spark.cli import build_parser
from cassieq_spark.cli import main as cli_main
from cassieq_spark.errors import ConfigError
from cassieq_spark.validate import watch_count, watch_interval

BASE = {
    "queue": "orders",
    "enqueued": 100,
    "acked": 40,
    "dead_lettered": 1,
    "backlog": 50,
    "in_flight": 7,
    "delayed": 2,
    "oldest_age_seconds": 3.25,
    "next_id": 100,
    "reader_pointer": 40,
    "repair_pointer": 0,
    "open_reservations": 1,
    "consumer": "billing-1",
}


def sample(at: float, **changes: object) -> watch.Sample:
    return watch.Sample(at, {**BASE, **changes})


def test_rates_are_the_change_of_each_total_per_second_between_two_samples() -> None:
    prev, cur = sample(10.0), sample(12.5, enqueued=1100, acked=540)
    assert watch.rate(prev, cur, "enqueued") == pytest.approx(400.0)
    assert watch.rate(prev, cur, "acked") == pytest.approx(200.0)


@pytest.mark.parametrize(
    "prev, cur",
    [
        (None, sample(1.0)),  # the first sample has nothing to compare with
        (sample(5.0), sample(5.0, enqueued=200)),  # no time passed
        (sample(5.0), sample(4.0, enqueued=200)),  # a clock that went back
        (sample(1.0, enqueued=500), sample(2.0, enqueued=3)),  # queue deleted and created again
    ],
)
def test_a_rate_that_cannot_be_known_is_none_not_a_made_up_number(prev, cur) -> None:
    assert watch.rate(prev, cur, "enqueued") is None


def test_rows_show_state_rates_consumer_and_pointers() -> None:
    got = {r.key: r for r in watch.rows(sample(0.0), sample(2.0, enqueued=2100, acked=1040))}
    assert [got[k].value for k in ("backlog", "in_flight", "delayed")] == ["50", "7", "2"]
    assert got["oldest_age"].value == "3.2 s"
    assert (got["enqueued"].value, got["enqueued"].rate) == ("2,100", "1,000.0/s")
    assert (got["acked"].value, got["acked"].rate) == ("1,040", "500.0/s")
    assert got["consumer"].value == "billing-1"
    assert [got[k].value for k in ("next_id", "reader", "repair", "open_reservations")] == [
        "100",
        "40",
        "0",
        "1",
    ]


def test_first_sample_has_no_rate_and_no_lease_holder_shows_a_dash() -> None:
    got = {r.key: r for r in watch.rows(None, sample(0.0, consumer=None))}
    assert got["enqueued"].rate == got["acked"].rate == "-"
    assert got["consumer"].value == "-"


def test_stats_without_a_consumer_field_leave_the_row_out() -> None:
    stats = {k: v for k, v in BASE.items() if k != "consumer"}
    assert "consumer" not in [r.key for r in watch.rows(None, watch.Sample(0.0, stats))]


def test_plain_line_is_key_value_pairs_without_separators() -> None:
    text = watch.line(sample(0.0), sample(1.0, enqueued=12345, acked=40))
    assert text.startswith("queue=orders backlog=50 in_flight=7 delayed=2 oldest_age=3.2s ")
    assert "enqueued=12345 (12245.0/s)" in text and "acked=40 (0.0/s)" in text
    assert "consumer=billing-1" in text and "reader=40" in text


def _fetcher(*answers: dict) -> tuple[list[int], Callable[[], dict]]:
    calls = [0]

    def fetch() -> dict:
        calls[0] += 1
        return answers[min(calls[0], len(answers)) - 1]

    return calls, fetch


def test_watch_off_a_terminal_prints_one_plain_line_per_refresh_and_stops_after_count() -> None:
    out = io.StringIO()
    calls, fetch = _fetcher({**BASE}, {**BASE, "enqueued": 130}, {**BASE, "enqueued": 160})
    ticks = iter([0.0, 1.0, 2.0])
    seen: list[watch.Sample] = []
    drawn = watch.watch(
        fetch,
        interval=0.01,
        count=3,
        console=Console(file=out, force_terminal=False),
        on_sample=lambda cur, prev: seen.append(cur),
        clock=lambda: next(ticks),
    )
    lines = out.getvalue().splitlines()
    assert drawn == calls[0] == len(lines) == len(seen) == 3
    assert "\x1b" not in out.getvalue()
    assert "enqueued=100 (-)" in lines[0]
    assert "enqueued=130 (30.0/s)" in lines[1] and "enqueued=160 (30.0/s)" in lines[2]


def test_watch_on_a_terminal_redraws_a_table_in_place() -> None:
    out = io.StringIO()
    _, fetch = _fetcher({**BASE})
    watch.watch(
        fetch,
        interval=0.01,
        count=2,
        console=Console(file=out, force_terminal=True, width=100),
    )
    text = out.getvalue()
    assert "\x1b[" in text  # cursor movement: the table is redrawn, not appended
    assert "queue orders" in text and "backlog (visible)" in text and "billing-1" in text


def test_watch_stops_when_its_stop_event_is_set() -> None:
    stop = threading.Event()
    stop.set()
    _, fetch = _fetcher({**BASE})
    drawn = watch.watch(
        fetch,
        interval=60,
        stop=stop,
        console=Console(file=io.StringIO(), force_terminal=False),
    )
    assert drawn == 1


@pytest.mark.parametrize("value, expected", [("0.2", 0.2), (" 2 ", 2.0), (3600, 3600.0)])
def test_watch_interval_accepts_numbers_in_range(value: object, expected: float) -> None:
    assert watch_interval(value) == expected


@pytest.mark.parametrize("value", ["0", "0.05", "-1", "3601", "abc", "", "nan", "inf", True])
def test_watch_interval_refuses_anything_else_naming_the_option(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^--interval must be a number of seconds from 0.1 to"):
        watch_interval(value)


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "x", True])
def test_watch_count_refuses_anything_but_a_whole_number_from_1(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^--count must be a whole number of refreshes >= 1"):
        watch_count(value)
    assert watch_count("3") == 3


@pytest.fixture
def cli_logging() -> Iterator[None]:
    # main() quiets the driver's logger for its one-line errors; later tests keep their logs.
    driver = logging.getLogger("cassandra")
    level = driver.level
    yield
    driver.setLevel(level)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--interval", "0"], "--interval must be a number of seconds from 0.1 to 3600"),
        (["--interval", "soon"], "--interval must be a number of seconds"),
        (["--count", "0"], "--count must be a whole number of refreshes >= 1"),
    ],
)
def test_a_bad_watch_value_is_one_line_and_exit_2_before_connecting(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], cli_logging: None
) -> None:
    # Port 1 answers nothing: reaching the connection would be exit 1, not 2.
    status = cli_main(["--port", "1", "stats", "q", "--watch", *args])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err, err


def test_interval_without_watch_is_refused(
    capsys: pytest.CaptureFixture[str], cli_logging: None
) -> None:
    assert cli_main(["--port", "1", "stats", "q", "--interval", "1"]) == 2
    assert "go with --watch" in capsys.readouterr().err


def test_stats_parser_takes_watch_interval_count() -> None:
    args = build_parser().parse_args(["stats", "q", "--watch", "--interval", "0.5", "--count", "2"])
    assert (args.watch, args.interval, args.count) == (True, "0.5", "2")
