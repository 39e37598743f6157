"""The fault seam's lost replies at a rate: a seed replays the same draws, the scope chooses
which statements, and the whole-run variable is read the same way in every process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from cassieq_spark.engine.store import faults

PLAIN_DELETE = "DELETE FROM {ks}.monoton WHERE queue_id = ? AND lo = ?"
CAS_DELETE = "DELETE FROM {ks}.monoton WHERE queue_id = ? AND lo = ? IF hi = ?"
READ = "SELECT hi FROM {ks}.monoton WHERE queue_id = ?"


@pytest.fixture(autouse=True)
def _clean_seam(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.reset()
    yield
    faults.reset()


def _draws(seed: int, n: int = 400) -> list[bool]:
    faults.reset()
    faults.inject(faults.LOST_REPLY, faults.is_write, times=None, rate=0.25, seed=seed)
    return [faults.take(PLAIN_DELETE) is not None for _ in range(n)]


def test_a_seeded_rate_disturbs_the_same_statements_again_and_about_that_share():
    first, again, other = _draws(7), _draws(7), _draws(8)
    assert first == again
    assert first != other
    assert 60 < sum(first) < 140  # 25% of 400, far from 0 and from all


def test_the_seed_of_a_rate_is_logged_so_a_run_can_be_replayed(caplog):
    with caplog.at_level(logging.WARNING, logger=faults.__name__):
        faults.inject(faults.LOST_REPLY, faults.is_write, times=None, rate=0.5)
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("fault seed ") and "rate 0.5" in message


def test_the_writes_scope_loses_plain_and_conditional_writes_but_never_reads():
    faults.inject(faults.LOST_REPLY, faults.is_write, times=None)
    assert faults.take(PLAIN_DELETE) == faults.LOST_REPLY
    assert faults.take(CAS_DELETE) == faults.LOST_REPLY
    assert faults.take("BEGIN BATCH INSERT INTO x ...; APPLY BATCH") == faults.LOST_REPLY
    assert faults.take(READ) is None


def test_the_whole_run_variable_names_scope_rate_and_seed(monkeypatch):
    monkeypatch.setenv(faults.ENV, "lost-reply:writes:1")
    faults.reset()
    assert faults.take(PLAIN_DELETE) == faults.LOST_REPLY
    monkeypatch.setenv(faults.ENV, "lost-reply")
    faults.reset()
    assert faults.take(PLAIN_DELETE) is None
    assert faults.take(CAS_DELETE) == faults.LOST_REPLY
    monkeypatch.setenv(faults.ENV, "lost-reply:writes:0.5:3:0.25")
    faults.reset()
    [rule] = faults.state.rules
    assert (rule.rate, rule.wait) == (0.5, 0.25)
    for bad in (
        "lost-reply:writes",
        "lost-reply:reads:0.1",
        "lost-reply:writes:0",
        "lost-reply:writes:0.1:x",
        "lost-reply:writes:0.1:1:-1",
        "retried",
    ):
        with pytest.raises(ValueError, match="lost-reply:SCOPE:RATE"):
            faults.parse_env(bad)


def test_every_process_that_inherits_the_variable_disturbs_and_logs_its_seed():
    code = (
        "from cassieq_spark.engine.store import faults\n"
        f"print(sum(faults.take({PLAIN_DELETE!r}) is not None for _ in range(200)))\n"
    )
    env = {**os.environ, faults.ENV: "lost-reply:writes:0.5:11"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "fault seed 11 for lost_reply at rate 0.5" in run.stderr
    faults.inject(faults.LOST_REPLY, faults.is_write, times=None, rate=0.5, seed=11)
    here = sum(faults.take(PLAIN_DELETE) is not None for _ in range(200))
    assert int(run.stdout) == here and 50 < here < 150  # the same draws in every process
