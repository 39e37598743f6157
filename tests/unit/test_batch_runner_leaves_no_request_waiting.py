"""The batch runner shared by the service's put and ack batchers never leaves a request
waiting: a call that returns the wrong number of results fails each request it carried, and a
runner cancelled mid-call cancels the requests it carried and those waiting for it. A bad JSON
body is refused with a new error each time (none keeps an earlier body alive)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from cassieq_spark.service import inputs
from cassieq_spark.service.batching import Batcher
from cassieq_spark.service.responses import ApiError


def test_a_call_with_too_few_results_fails_each_request_it_carried() -> None:
    async def short(key: str, items: Sequence[int]) -> list[int]:
        await asyncio.sleep(0.01)
        return list(items)[:-1]

    async def main() -> list:
        b: Batcher[str, int, int] = Batcher(short, 10)
        return await asyncio.wait_for(
            asyncio.gather(*(b.submit("q", i) for i in range(4)), return_exceptions=True), 5
        )

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) for r in results), results


def test_a_cancelled_runner_cancels_the_requests_it_carried_and_those_waiting() -> None:
    async def main() -> list:
        entered = asyncio.Event()

        async def slow(key: str, items: Sequence[int]) -> list[int]:
            entered.set()
            await asyncio.sleep(60)
            return list(items)

        b: Batcher[str, int, int] = Batcher(slow, 10)
        first = asyncio.ensure_future(b.submit("q", 1))
        await entered.wait()
        waiting = asyncio.ensure_future(b.submit("q", 2))  # waits for the next call
        await asyncio.sleep(0)
        for task in asyncio.all_tasks():
            if task.get_coro().__name__ == "_run":  # type: ignore[union-attr]
                task.cancel()
        return await asyncio.wait_for(asyncio.gather(first, waiting, return_exceptions=True), 5)

    results = asyncio.run(main())
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results


def test_each_bad_json_body_is_refused_with_an_error_of_its_own() -> None:
    errors = []
    for body in (b"{", b"[1,", b"nope"):
        with pytest.raises(ApiError) as caught:
            inputs.json_body(body)
        errors.append(caught.value)
    assert len({id(e) for e in errors}) == 3
    assert all(e.status == 400 and e.body["message"] == "Unable to process JSON" for e in errors)
