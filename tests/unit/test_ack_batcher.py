"""The service's ack batcher: acks of one queue that arrive during an ack_many share the next
one, and each ack gets its own receipt's result."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from cassieq_spark.engine.consume.batch_ack import ReceiptResult
from cassieq_spark.service.ack_batcher import AckBatcher


class Acks:
    """An ack_many that acks receipts starting with "good" once each, recording each call."""

    def __init__(self, seconds: float = 0.01):
        self.seconds = seconds
        self.calls: list[tuple[str, list[str]]] = []
        self.acked: set[str] = set()

    async def ack_many(self, queue: str, receipts: Sequence[str]) -> list[ReceiptResult]:
        self.calls.append((queue, list(receipts)))
        await asyncio.sleep(self.seconds)
        out = []
        for r in receipts:
            ok = r.startswith("good") and r not in self.acked
            self.acked.add(r)
            out.append(ReceiptResult(r, "ok" if ok else "stale", "" if ok else "stale"))
        return out


def test_acks_arriving_during_an_ack_many_share_the_next_one_each_with_its_own_result() -> None:
    acks = Acks()
    batcher = AckBatcher(acks.ack_many)

    async def run() -> list[bool]:
        first = asyncio.ensure_future(batcher.ack("q", "good-0"))
        await asyncio.sleep(acks.seconds / 2)  # the first ack's call is in flight
        rest = await asyncio.gather(
            *(batcher.ack("q", f"good-{i}" if i % 3 else f"old-{i}") for i in range(1, 10)),
            batcher.ack("q", "good-1"),  # the same receipt twice: one of them acks
        )
        return [await first, *rest]

    got = asyncio.run(run())
    assert [len(r) for _, r in acks.calls] == [1, 10]
    assert got[:10] == [True] + [bool(i % 3) for i in range(1, 10)]
    assert got[10] is False  # good-1 was acked by the first of the two
    assert batcher.idle


def test_acks_of_different_queues_are_never_mixed_in_one_call() -> None:
    acks = Acks()
    batcher = AckBatcher(acks.ack_many)

    async def run() -> None:
        await asyncio.gather(*(batcher.ack(q, f"good-{q}{i}") for q in "ab" for i in range(3)))

    asyncio.run(run())
    assert sorted((q, len(r)) for q, r in acks.calls) == [("a", 3), ("b", 3)]
    assert all(all(x.startswith(f"good-{q}") for x in r) for q, r in acks.calls)
