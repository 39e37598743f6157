"""The service's get batcher: gets of one queue that arrive during a receive share the next
one, each waiter gets its own message, and no message stays claimed for a waiter that left."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import pytest

from cassieq_spark.service.get_batcher import GetBatcher


class Queue:
    """A read_many over a list of messages (ints), recording each call, and a give_back that
    puts messages back at the front."""

    def __init__(self, messages: int, seconds: float = 0.01, fail_on: int | None = None):
        self.visible = list(range(messages))
        self.seconds = seconds
        self.fail_on = fail_on
        self.calls: list[tuple[str, float, int]] = []
        self.returned: list[int] = []
        self.during_read: asyncio.Event | None = None
        self.after_read: Callable[[], object] | None = None  # called as a receive returns

    async def read_many(self, queue: str, vt: float, n: int) -> list[int]:
        self.calls.append((queue, vt, n))
        if self.during_read is not None:
            self.during_read.set()
        await asyncio.sleep(self.seconds)
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise RuntimeError("Cassandra unavailable")
        out, self.visible = self.visible[:n], self.visible[n:]
        if self.after_read is not None:
            self.after_read()
        return out

    async def give_back(self, queue: str, messages: Sequence[int]) -> int:
        self.returned.extend(messages)
        self.visible = list(messages) + self.visible
        return len(messages)


async def here() -> bool:
    return False


def test_a_lone_get_is_served_at_once_by_a_receive_of_one() -> None:
    q = Queue(3)
    batcher = GetBatcher(q.read_many, q.give_back)
    assert asyncio.run(batcher.get("q", 30.0, here)) == 0
    assert q.calls == [("q", 30.0, 1)]
    assert batcher.idle


def test_gets_arriving_during_a_receive_share_the_next_one_each_with_its_own_message() -> None:
    q = Queue(100)
    batcher = GetBatcher(q.read_many, q.give_back)

    async def run() -> list[int | None]:
        first = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await asyncio.sleep(q.seconds / 2)  # the first get's receive is in flight
        rest = await asyncio.gather(*(batcher.get("q", 30.0, here) for _ in range(49)))
        return [await first, *rest]

    got = asyncio.run(run())
    assert [n for _, _, n in q.calls] == [1, 49]
    assert sorted(got) == list(range(50))  # type: ignore[type-var]
    assert q.returned == []


def test_gets_with_another_queue_or_timeout_are_received_apart() -> None:
    q = Queue(100)
    batcher = GetBatcher(q.read_many, q.give_back)

    async def run() -> None:
        await asyncio.gather(
            batcher.get("a", 30.0, here),
            batcher.get("a", 30.0, here),
            batcher.get("a", 60.0, here),
            batcher.get("b", 30.0, here),
        )

    asyncio.run(run())
    assert sorted(q.calls) == [("a", 30.0, 2), ("a", 60.0, 1), ("b", 30.0, 1)]


def test_an_empty_queue_answers_every_waiter_none_in_one_receive() -> None:
    q = Queue(0)
    batcher = GetBatcher(q.read_many, q.give_back)

    async def run() -> list[int | None]:
        first = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await asyncio.sleep(q.seconds / 2)
        rest = await asyncio.gather(*(batcher.get("q", 30.0, here) for _ in range(20)))
        return [await first, *rest]

    assert asyncio.run(run()) == [None] * 21
    assert [n for _, _, n in q.calls] == [1, 20]


def test_waiters_left_without_a_message_wait_for_the_next_receive_not_a_204() -> None:
    q = Queue(3)
    batcher = GetBatcher(q.read_many, q.give_back)

    async def run() -> list[int | None]:
        first = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await asyncio.sleep(q.seconds / 2)
        rest = await asyncio.gather(*(batcher.get("q", 30.0, here) for _ in range(5)))
        return [await first, *rest]

    got = asyncio.run(run())
    assert sorted(m for m in got if m is not None) == [0, 1, 2]
    assert got.count(None) == 3
    # 1, then 5 (2 served), then the 3 unserved once more: that receive found nothing.
    assert [n for _, _, n in q.calls] == [1, 5, 3]


def test_a_waiter_gone_before_the_receive_is_not_counted_in_it() -> None:
    q = Queue(10)
    batcher = GetBatcher(q.read_many, q.give_back)

    async def left() -> bool:
        return True

    async def run() -> list[int | None]:
        first = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await asyncio.sleep(q.seconds / 2)
        rest = await asyncio.gather(
            *(batcher.get("q", 30.0, left if i % 2 else here) for i in range(10))
        )
        return [await first, *rest]

    got = asyncio.run(run())
    assert [n for _, _, n in q.calls] == [1, 5]
    assert got[1:][1::2] == [None] * 5
    assert sorted(m for m in got if m is not None) == list(range(6))
    assert q.returned == []


@pytest.mark.parametrize("how", ["disconnected", "cancelled"])
def test_a_message_claimed_for_a_waiter_that_left_during_the_receive_is_given_back(
    how: str,
) -> None:
    q = Queue(10, seconds=0.05)
    batcher = GetBatcher(q.read_many, q.give_back)
    gone = {"now": False}

    async def leaves() -> bool:
        return gone["now"]

    async def run() -> tuple[list[int | None], asyncio.Future]:
        q.during_read = asyncio.Event()
        stays = asyncio.ensure_future(batcher.get("q", 30.0, here))
        leaving = asyncio.ensure_future(batcher.get("q", 30.0, leaves))
        stays_too = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await q.during_read.wait()  # one receive for all three is in flight
        await asyncio.sleep(0)
        if how == "disconnected":
            gone["now"] = True
        else:
            leaving.cancel()
        results = [await stays, await stays_too]
        await asyncio.sleep(0.01)
        return results, leaving

    got, leaving = asyncio.run(run())
    assert [n for _, _, n in q.calls] == [3]
    assert sorted(got) == [0, 1]  # type: ignore[type-var]
    assert q.returned == [2]  # the leaver's message is visible again at once
    assert batcher.given_back == 1 and batcher.idle
    assert leaving.cancelled() or leaving.result() is None


def test_a_failed_receive_fails_every_waiter_of_its_batch_and_the_next_batch_still_runs() -> None:
    q = Queue(10, fail_on=2)
    batcher = GetBatcher(q.read_many, q.give_back)

    async def run() -> tuple[list, int | None]:
        first = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await asyncio.sleep(q.seconds / 2)
        failed = await asyncio.gather(
            *(batcher.get("q", 30.0, here) for _ in range(4)), return_exceptions=True
        )
        await first
        return failed, await batcher.get("q", 30.0, here)

    failed, after = asyncio.run(run())
    assert all(isinstance(e, RuntimeError) for e in failed)
    assert after == 1 and batcher.idle


def test_batches_are_capped_and_the_rest_wait_for_the_next_receive() -> None:
    q = Queue(100)
    batcher = GetBatcher(q.read_many, q.give_back, max_batch=10)

    async def run() -> list[int | None]:
        first = asyncio.ensure_future(batcher.get("q", 30.0, here))
        await asyncio.sleep(q.seconds / 2)
        rest = await asyncio.gather(*(batcher.get("q", 30.0, here) for _ in range(25)))
        return [await first, *rest]

    got = asyncio.run(run())
    assert [n for _, _, n in q.calls] == [1, 10, 10, 5]
    assert sorted(got) == list(range(26))  # type: ignore[type-var]


@pytest.mark.parametrize("how", ["disconnected", "cancelled"])
def test_a_client_that_leaves_after_the_hand_out_before_its_reply_gives_its_message_back(
    how: str,
) -> None:
    """The hand-out saw the client there; it leaves (or its request is cancelled) before its
    handler resumes with the message: the message is given back, not written to nobody."""
    q = Queue(10)
    batcher = GetBatcher(q.read_many, q.give_back)
    gone = {"now": False}

    async def leaves() -> bool:
        return gone["now"]

    async def run() -> asyncio.Future:
        task = asyncio.ensure_future(batcher.get("q", 30.0, leaves))

        def leave_next() -> None:
            # Scheduled as the receive returns: runs after the hand-out and before the
            # waiter's handler resumes.
            loop = asyncio.get_running_loop()
            if how == "disconnected":
                loop.call_soon(gone.update, {"now": True})
            else:
                loop.call_soon(task.cancel)

        q.after_read = leave_next
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.01)
        return task

    task = asyncio.run(run())
    assert q.returned == [0]
    assert batcher.given_back == 1 and batcher.idle
    assert task.cancelled() if how == "cancelled" else task.result() is None


def test_a_client_still_there_after_the_hand_out_gets_its_message() -> None:
    q = Queue(10)
    batcher = GetBatcher(q.read_many, q.give_back)
    looks = []

    async def there() -> bool:
        looks.append(1)
        return False

    assert asyncio.run(batcher.get("q", 30.0, there)) == 0
    # before the receive, at the hand-out, and right before the reply
    assert len(looks) == 3 and q.returned == [] and batcher.given_back == 0
