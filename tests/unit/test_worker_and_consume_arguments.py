"""The workers and the consume loops check every argument when they are made, before any
receive, thread or signal handler: a handler that would lose every message, a visibility
timeout no thread can wait on, a text where a number goes. No Cassandra: nothing is sent."""

from __future__ import annotations

import functools
import math
import signal
import threading

import pytest

from cassieq_spark.async_worker import AsyncWorker
from cassieq_spark.consume_loop import AsyncConsumeLoop, ConsumeLoop
from cassieq_spark.errors import ConfigError
from cassieq_spark.worker import Backoff, Worker

pytestmark = pytest.mark.unit


async def _coroutine_handler(m) -> None:
    return None


class _AsyncCallable:
    async def __call__(self, m) -> None:
        return None


@pytest.mark.parametrize(
    ("handler", "error"),
    [
        (None, r"handler must be a function taking a Message, got None"),
        ("handle_it", r"handler must be a function taking a Message, got 'handle_it'"),
        (_coroutine_handler, r"is a coroutine function: the threaded Worker would never await"),
        (functools.partial(_coroutine_handler), r"is a coroutine function"),
        (_AsyncCallable(), r"is a coroutine function"),
    ],
)
def test_the_threaded_worker_refuses_a_handler_it_could_not_run(handler, error):
    with pytest.raises(ConfigError, match=error):
        Worker(None, "q", handler)  # type: ignore[arg-type]


@pytest.mark.parametrize("handler", [None, print, lambda m: None, "h"])
def test_the_async_worker_refuses_a_handler_that_is_not_a_coroutine_function(handler):
    with pytest.raises(ConfigError, match=r"handler must be a coroutine function \(async def\)"):
        AsyncWorker(None, "q", handler)  # type: ignore[arg-type]


def test_the_async_worker_takes_an_async_callable_object():
    assert AsyncWorker(None, "q", _AsyncCallable()).handler is not None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"visibility_timeout": math.inf}, r"visibility timeout must be a finite number"),
        ({"visibility_timeout": "abc"}, r"visibility_timeout must be a number \(int or float\)"),
        ({"visibility_timeout": 0.01}, r"visibility timeout must be at least 0.5 seconds"),
        ({"wait": "5"}, r"wait must be a number \(int or float\), got '5'"),
        ({"wait": -1}, r"wait must be a finite number of seconds >= 0, got -1"),
        ({"shutdown_grace": "5"}, r"shutdown_grace must be a number \(int or float\)"),
        ({"shutdown_grace": math.nan}, r"shutdown_grace must be a finite number of seconds"),
        ({"batch": -5}, r"batch must be an integer from 1 to 1000, got -5"),
        ({"batch": 0}, r"batch must be an integer from 1 to 1000, got 0"),
        ({"backoff": "fast"}, r"backoff must be a Backoff .* got 'fast'"),
        ({"metrics": 5}, r"metrics must be a WorkerMetrics .* got 5"),
        ({"heartbeat": "no"}, r"heartbeat must be True or False, got 'no'"),
        ({"stop_when_empty": "no"}, r"stop_when_empty must be True or False, got 'no'"),
        ({"handle_signals": 1}, r"handle_signals must be True or False, got 1"),
    ],
)
def test_worker_options_are_checked_when_the_worker_is_made(options, error):
    before = threading.active_count()
    with pytest.raises(ConfigError, match=error):
        Worker(None, "q", print, **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=error):
        AsyncWorker(None, "q", _coroutine_handler, **options)  # type: ignore[arg-type]
    assert threading.active_count() == before


def test_a_worker_with_an_infinite_visibility_timeout_leaves_the_signal_handlers_alone():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(ConfigError):
        Worker(None, "q", print, visibility_timeout=math.inf).run()  # type: ignore[arg-type]
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.parametrize(
    ("first", "factor", "cap"),
    [(1, math.nan, 300), (1, math.inf, 300), (math.nan, 2, 300), ("1", 2, 300), (1, 2, True)],
)
def test_a_backoff_takes_finite_numbers_only(first, factor, cap):
    with pytest.raises(ConfigError, match=r"backoff needs numbers 0 <= first <= cap"):
        Backoff(first, factor, cap)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"visibility_timeout": math.inf}, r"visibility timeout must be a finite number"),
        ({"visibility_timeout": "abc"}, r"visibility_timeout must be a number \(int or float\)"),
        ({"visibility_timeout": 0.01}, r"visibility timeout must be at least 0.5 seconds"),
        ({"batch": 0}, r"batch must be an integer from 1 to 1000, got 0"),
        ({"batch": "10"}, r"batch must be an integer from 1 to 1000, got '10'"),
        ({"wait": "5"}, r"wait must be a number \(int or float\), got '5'"),
        ({"wait": 21}, r"wait must be at most 20 seconds"),
        ({"heartbeat": "no"}, r"heartbeat must be True or False, got 'no'"),
        ({"stop_when_empty": "no"}, r"stop_when_empty must be True or False, got 'no'"),
    ],
)
def test_consume_arguments_are_checked_before_any_thread_starts(options, error):
    before = threading.active_count()
    for loop in (ConsumeLoop, AsyncConsumeLoop):
        with pytest.raises(ConfigError, match=error):
            loop(None, "q", **{"visibility_timeout": 30, **options})  # type: ignore[arg-type]
    assert threading.active_count() == before
