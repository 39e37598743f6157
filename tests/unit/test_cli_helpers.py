"""The pieces both command lines share: connection flags with env fall-backs, error lines."""

from __future__ import annotations

import argparse
import os

import pytest

from cassieq_spark.config import add_connection_flags, options_from_flags, seconds
from cassieq_spark.errors import ConfigError, QueueNotFoundError, one_line


def _parse(argv, monkeypatch, env=None):
    for k in list(os.environ):
        if k.startswith("CASSIEQ_"):
            monkeypatch.delenv(k)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    p = argparse.ArgumentParser()
    add_connection_flags(p)
    return options_from_flags(p.parse_args(argv))


def test_flags_win_over_environment(monkeypatch):
    opts = _parse(
        ["--port", "9999", "--local-dc", "dc1"],
        monkeypatch,
        {"CASSIEQ_PORT": "1234", "CASSIEQ_KEYSPACE": "ks", "CASSIEQ_PASSWORD": "s3cret"},
    )
    assert opts == {"port": "9999", "localDc": "dc1", "keyspace": "ks", "password": "s3cret"}


def test_no_flags_no_environment_gives_no_options(monkeypatch):
    assert _parse([], monkeypatch) == {}


def test_one_line_folds_whitespace_and_names_foreign_errors():
    assert one_line(QueueNotFoundError("queue 'x'\n  does not exist")) == "queue 'x' does not exist"
    assert one_line(OSError("disk\tfull")) == "OSError: disk full"
    assert one_line(ValueError("")) == "ValueError: ValueError"


@pytest.mark.parametrize("value", [-1, "abc", float("nan"), float("inf"), None])
def test_seconds_rejects_what_is_not_a_finite_non_negative_number(value):
    with pytest.raises(ConfigError, match="delay"):
        seconds(value, "delay")


def test_seconds_accepts_numbers_and_numeric_strings():
    assert seconds("1.5", "delay") == 1.5 and seconds(0, "delay") == 0.0
