"""State that belongs to one call stays with that call when many calls share a thread.

Under the asyncio client every operation is a call stack suspended and resumed on the event
loop's thread (``async_bridge``), so anything kept per thread is shared by all of them. These
tests run many operations at once, each suspended in the middle, and check that each sees
only what it stored itself (``suspend.CallLocal``) and that the client metrics count every
one of them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cassieq_spark import async_bridge
from cassieq_spark.engine.store import suspend
from cassieq_spark.engine.store.suspend import CallLocal

pytestmark = [pytest.mark.unit, pytest.mark.fast]

CALLS = 50


def test_each_suspended_operation_sees_only_its_own_state() -> None:
    state = CallLocal()

    def call(k: int) -> tuple[int, object]:
        state.get()["mine"] = k
        suspend.pause(0.01 * (k % 5))  # the others run meanwhile, on this thread
        return k, state.get().get("mine")

    async def scenario() -> list[tuple[int, object]]:
        return await asyncio.gather(*(async_bridge.run(call, k) for k in range(CALLS)))

    seen = asyncio.run(scenario())
    assert [k for k, _ in seen] == list(range(CALLS))
    wrong = [(k, got) for k, got in seen if got != k]
    assert not wrong, f"operations read another operation's state: {wrong[:5]}"


def test_a_new_operation_starts_empty_and_threads_keep_their_own() -> None:
    state = CallLocal()

    async def first() -> None:
        await async_bridge.run(lambda: state.get().update(left="behind"))

    asyncio.run(first())
    fresh = asyncio.run(async_bridge.run(lambda: dict(state.get())))
    assert fresh == {}

    state.get()["here"] = "main"
    other: dict = {}
    t = threading.Thread(target=lambda: other.update(state.get()))
    t.start()
    t.join()
    assert other == {}
    assert state.get() == {"here": "main"}


def test_client_metrics_count_every_concurrent_asyncio_call() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from cassieq_spark.observability.client_metrics import (
        disable_client_metrics,
        enable_client_metrics,
        timed,
    )

    @timed("probe")
    def probe(k: int) -> int:
        suspend.pause(0.01)  # suspended inside the timed call: the others start meanwhile
        return k

    @timed("outer")
    def outer() -> int:
        return probe(-1)  # nested: counted once, as "outer"

    registry = prometheus_client.CollectorRegistry()
    enable_client_metrics(registry)
    try:

        async def scenario() -> list[int]:
            calls = [async_bridge.run(probe, k) for k in range(CALLS)]
            return await asyncio.gather(*calls, async_bridge.run(outer))

        assert sorted(asyncio.run(scenario())) == [-1, *range(CALLS)]
    finally:
        disable_client_metrics()

    def count(operation: str) -> float:
        value = registry.get_sample_value(
            "cassieq_client_operations_total", {"operation": operation, "outcome": "ok"}
        )
        return value or 0.0

    assert count("probe") == CALLS, f"{count('probe')} of {CALLS} concurrent calls counted"
    assert count("outer") == 1
