"""The service's put batcher: puts that arrive while a write is in flight go out together."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from cassieq_spark.service.put_batcher import PutBatcher


class Store:
    """A write_many that hands out ids in order and records each call."""

    def __init__(self, seconds: float = 0.01, fail_on: int | None = None):
        self.seconds = seconds
        self.fail_on = fail_on
        self.calls: list[tuple[str, list[bytes], float]] = []
        self.next_id = 0

    async def write_many(
        self, queue: str, payloads: Sequence[bytes], delay: float, group: str | None = None
    ) -> list[int]:
        self.calls.append((queue, list(payloads), delay))
        await asyncio.sleep(self.seconds)
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise RuntimeError("Cassandra unavailable")
        ids = list(range(self.next_id, self.next_id + len(payloads)))
        self.next_id += len(payloads)
        return ids


def test_a_lone_put_is_written_at_once_in_a_batch_of_one() -> None:
    store = Store()
    batcher = PutBatcher(store.write_many)
    assert asyncio.run(batcher.put("q", b"a", 0.0)) == 0
    assert store.calls == [("q", [b"a"], 0.0)]


def test_puts_arriving_during_a_write_share_the_next_one_and_each_gets_its_own_id() -> None:
    store = Store()
    batcher = PutBatcher(store.write_many)

    async def run() -> list[int]:
        first = asyncio.ensure_future(batcher.put("q", b"m0", 0.0))
        await asyncio.sleep(store.seconds / 2)  # the first put's write is in flight
        rest = await asyncio.gather(
            *(batcher.put("q", f"m{i}".encode(), 0.0) for i in range(1, 50))
        )
        return [await first, *rest]

    ids = asyncio.run(run())
    # The first put starts a write; the 49 that came while it ran go out together.
    assert [len(c[1]) for c in store.calls] == [1, 49]
    payload_of = [p for _, ps, _ in store.calls for p in ps]
    assert sorted(ids) == list(range(50))
    assert {payload_of[i] for i in ids} == {f"m{i}".encode() for i in range(50)}
    # each caller got the id its own payload was written under
    assert all(payload_of[ids[i]] == f"m{i}".encode() for i in range(50))


def test_queues_and_delays_are_never_mixed_in_one_write() -> None:
    store = Store()
    batcher = PutBatcher(store.write_many)

    async def run() -> None:
        await asyncio.gather(
            *(batcher.put(q, b"x", d) for q in ("a", "b") for d in (0.0, 5.0) for _ in range(3))
        )

    asyncio.run(run())
    for _queue, payloads, _delay in store.calls:
        assert payloads and all(p == b"x" for p in payloads)
    assert sum(len(c[1]) for c in store.calls) == 12
    assert {(c[0], c[2]) for c in store.calls} == {("a", 0.0), ("a", 5.0), ("b", 0.0), ("b", 5.0)}


def test_a_failed_write_fails_its_own_puts_only() -> None:
    store = Store(fail_on=1)
    batcher = PutBatcher(store.write_many)

    async def run() -> list[object]:
        first = asyncio.ensure_future(batcher.put("q", b"m0", 0.0))
        await asyncio.sleep(store.seconds / 2)
        rest = asyncio.gather(
            *(batcher.put("q", f"m{i}".encode(), 0.0) for i in range(1, 5)), return_exceptions=True
        )
        return [*(await asyncio.gather(first, return_exceptions=True)), *(await rest)]

    results = asyncio.run(run())
    assert isinstance(results[0], RuntimeError)  # the first put's own write failed
    assert results[1:] == [0, 1, 2, 3]  # the next write carried the four others


def test_a_batch_is_cut_at_max_batch() -> None:
    store = Store()
    batcher = PutBatcher(store.write_many, max_batch=10)

    async def run() -> None:
        await asyncio.gather(*(batcher.put("q", b"x", 0.0) for _ in range(26)))

    asyncio.run(run())
    # everything waiting when the write starts goes out, max_batch at a time
    assert [len(c[1]) for c in store.calls] == [10, 10, 6]


@pytest.mark.parametrize("n", [1, 7])
def test_nothing_is_left_waiting_after_the_writes(n: int) -> None:
    # A key left behind would make the next put wait for a writer that has ended.
    store = Store()
    batcher = PutBatcher(store.write_many)

    async def run() -> None:
        await asyncio.gather(*(batcher.put("q", b"x", 0.0) for _ in range(n)))

    asyncio.run(run())
    assert batcher.idle
