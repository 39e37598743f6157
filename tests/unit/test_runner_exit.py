"""SIGTERM of the streaming source runner routed through the reader's ``stop()``
(``spark/runner_exit.py``): installed only in the main thread of PySpark's streaming source
runner; a SIGTERM before ``stop()`` ends the runner's loop by raising (its ``finally`` calls
``stop()``), one while ``stop()`` runs is ignored, and so is the JVM's second one."""

from __future__ import annotations

import os
import signal
import sys
import threading
import types

import pytest

from cassieq_spark.spark import runner_exit
from cassieq_spark.spark.runner_exit import StopOnTerminate


@pytest.fixture
def as_runner(monkeypatch):
    """This process dressed as the streaming source runner; SIGTERM's handler restored after."""
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=runner_exit.RUNNER_MODULE)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def _runner_loop(terminate: StopOnTerminate, stop) -> list[str]:
    """The shape of PySpark's runner: a loop waiting on the JVM, ``stop()`` in its finally."""
    seen = []
    try:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the loop waits
            seen.append("loop went on")
        finally:
            stop()
    except SystemExit as exc:
        seen.append(f"exit {exc.code}")
    return seen


def test_a_sigterm_before_stop_ends_the_loop_and_stop_runs_whole(as_runner):
    terminate = StopOnTerminate()
    assert terminate.installed
    calls = []

    def stop():
        terminate.stopping = True
        os.kill(os.getpid(), signal.SIGTERM)  # the JVM's second SIGTERM, during the release
        calls.append("released")

    assert _runner_loop(terminate, stop) == [f"exit {128 + signal.SIGTERM}"]
    assert calls == ["released"]


def test_a_sigterm_while_stop_runs_lets_it_finish(as_runner):
    terminate = StopOnTerminate()
    terminate.stopping = True  # the loop ended by itself (socket closed) and stop() began
    os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_not_installed_outside_the_runner():
    assert not runner_exit.in_source_runner()  # pytest's __main__
    assert not StopOnTerminate().installed


def test_not_installed_off_the_main_thread(as_runner):
    got = []
    t = threading.Thread(target=lambda: got.append(StopOnTerminate().installed))
    t.start()
    t.join()
    assert got == [False]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_handler_installed_before_is_left_alone(as_runner):
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGTERM, mine)
    assert not StopOnTerminate().installed
    assert signal.getsignal(signal.SIGTERM) is mine
