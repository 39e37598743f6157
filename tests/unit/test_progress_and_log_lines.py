"""What an operator reads: progress as JSON lines (first, at most one a second, last), the
progress bar drawn on a terminal stream, and JSON log lines with timestamp, level, logger,
request id and account."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging

import pytest

from cassieq_spark.engine.core.progress import start_task
from cassieq_spark.errors import ConfigError
from cassieq_spark.observability.logs import configure_logging, log_format, request_context
from cassieq_spark.observability.progress_view import (
    BarProgress,
    JsonLinesProgress,
    progress_sink,
)


def test_json_progress_lines_are_the_first_the_last_and_at_most_one_a_second():
    out = io.StringIO()
    task = start_task(JsonLinesProgress(out, interval=3600), "redrive", "a -> b", 3)
    for _ in range(3):
        task.advance(1, moved=1)
    task.finish(moved=3, taken_over=0)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(x["done"], x["finished"]) for x in lines] == [(1, False), (3, True)]
    last = lines[-1]
    assert last["progress"] == "redrive" and last["subject"] == "a -> b"
    assert last["total"] == 3 and last["moved"] == 3 and last["taken_over"] == 0


def test_a_task_refused_before_its_first_unit_reports_nothing():
    out = io.StringIO()
    start_task(JsonLinesProgress(out, interval=0), "bootstrap", "ks", 4, unit="steps")
    assert out.getvalue() == ""


def test_a_progress_bar_is_drawn_on_its_stream():
    out = io.StringIO()
    bar = BarProgress(out)
    task = start_task(bar, "purge", "orders", 10, unit="ids")
    task.advance(10)
    task.finish(purged=7)
    assert "purge orders" in out.getvalue() and "purged=7" in out.getvalue()


def test_progress_modes():
    assert progress_sink("off") is None
    assert isinstance(progress_sink("auto", io.StringIO()), JsonLinesProgress)  # not a terminal
    assert isinstance(progress_sink("json", io.StringIO()), JsonLinesProgress)
    with pytest.raises(ConfigError, match="--progress must be one of"):
        progress_sink("loud")


def test_json_log_lines_carry_the_request_and_account(monkeypatch):
    out = io.StringIO()
    handler = configure_logging("json", logging.INFO, stream=out)
    try:
        log = logging.getLogger("cassieq_spark.test")
        with request_context("abc123", "acct-1"):
            log.warning("moved %d", 5)
        log.info("outside a request")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    first, second, third = lines
    assert first["message"] == "moved 5" and first["level"] == "WARNING"
    assert first["logger"] == "cassieq_spark.test"
    assert first["request_id"] == "abc123" and first["account"] == "acct-1"
    stamp = dt.datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.timezone.utc) - stamp).total_seconds()) < 60
    assert "request_id" not in second
    assert "ValueError: boom" in third["exception"]
    monkeypatch.setenv("CASSIEQ_LOG_FORMAT", "yaml")
    with pytest.raises(ConfigError, match="CASSIEQ_LOG_FORMAT must be text or json"):
        log_format(None)
