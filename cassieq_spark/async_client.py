"""``AsyncQueueClient``: the :class:`~cassieq_spark.client.QueueClient` API for asyncio code.

import asyncio
from cassieq_spark import AsyncQueueClient

async def main():
    async with await AsyncQueueClient.connect(["127.0.0.1"]) as q:
        await q.create_queue("jobs", exist_ok=True)
        await q.put("jobs", b"hello")
        m = await q.get("jobs")
        await q.ack("jobs", m.pop_receipt)

Every method is the synchronous client's method of the same name and arguments, run by
:func:`cassieq_spark.async_bridge.run`: the same validation, caching and protocol, its round
trips sent with the driver's ``execute_async`` and awaited on the event loop (no thread per
call), long polls waiting with ``asyncio.sleep``. Many calls may run at once on one loop, each on a
client of its own from a pool on one connection (:meth:`QueueClient.sibling`).
``connect``, ``close`` and ``bootstrap`` run on a worker thread (connecting and schema changes
have no asynchronous form in the driver; they are rare).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from cassandra.auth import AuthProvider

from . import async_bridge
from .async_worker import AsyncWorker
from .client import PutEntry, QueueClient
from .consume_loop import AsyncConsumeLoop, Releaser
from .engine.consume.batch_ack import ReceiptResult
from .engine.core import queues
from .engine.core.messages import Message
from .engine.core.progress import ProgressSink
from .engine.core.queues import QueueInfo
from .engine.upkeep.batch_moves import DEFAULT_BATCH as DEFAULT_MOVE_BATCH
from .engine.upkeep.moves import MoveReport
from .engine.upkeep.purge import PurgeReport
from .engine.upkeep.repair import RepairReport
from .worker import WorkerReport


class AsyncQueueClient:
    """A connection to the queues of one keyspace, for asyncio. Safe for any number of
    concurrent calls from tasks of one event loop; one per process is enough."""

    def __init__(self, client: QueueClient):
        self.sync = client
        # Concurrent calls each take a client of their own (one connection under all of them):
        # a client's consumer caches are not meant for two operations at once.
        self._free: list[QueueClient] = [client]

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        contact_points: Sequence[str] | str = ("127.0.0.1",),
        port: int = 9042,
        keyspace: str = "cassieq",
        local_dc: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        consistency: str = "LOCAL_QUORUM",
        serial_consistency: str = "LOCAL_SERIAL",
        secure_connect_bundle: str | None = None,
        auth_provider: AuthProvider | None = None,
    ) -> AsyncQueueClient:
        """:meth:`QueueClient.connect`, on a worker thread."""

        def connect() -> QueueClient:
            return QueueClient.connect(
                contact_points,
                port=port,
                keyspace=keyspace,
                local_dc=local_dc,
                username=username,
                password=password,
                ssl_context=ssl_context,
                consistency=consistency,
                serial_consistency=serial_consistency,
                secure_connect_bundle=secure_connect_bundle,
                auth_provider=auth_provider,
            )

        return cls(await asyncio.get_running_loop().run_in_executor(None, connect))

    @classmethod
    async def from_options(cls, options: Mapping[str, str]) -> AsyncQueueClient:
        """:meth:`QueueClient.from_options`, on a worker thread."""
        loop = asyncio.get_running_loop()
        return cls(await loop.run_in_executor(None, QueueClient.from_options, options))

    def releaser(self) -> Releaser:
        """The synchronous client's releaser thread (:meth:`QueueClient.releaser`): it settles
        the consume loops of this client left without ``aclose()`` too."""
        return self.sync.releaser()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sync.close)

    async def __aenter__(self) -> AsyncQueueClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        client = self._free.pop() if self._free else self.sync.sibling()
        try:
            return await async_bridge.run(getattr(client, method), *args, **kwargs)
        finally:
            self._free.append(client)

    # -- schema and queues ----------------------------------------------------------------------

    async def bootstrap(
        self,
        create_keyspace: bool = False,
        replication_factor: int | None = None,
        app_role: str | None = None,
        app_password: str | None = None,
        replication: Mapping[str, object] | str | None = None,
        tables_only: bool = False,
        progress: ProgressSink | None = None,
    ) -> int:
        """:meth:`QueueClient.bootstrap`, on a worker thread (schema changes)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None,
            lambda: self.sync.bootstrap(
                create_keyspace=create_keyspace,
                replication_factor=replication_factor,
                app_role=app_role,
                app_password=app_password,
                replication=replication,
                tables_only=tables_only,
                progress=progress,
            ),
        )

    async def create_queue(
        self,
        name: str,
        bucket_size: int = queues.UNSET,
        max_delivery_count: int = queues.UNSET,
        visibility_timeout: float = queues.UNSET,
        repair_timeout: float = queues.UNSET,
        dead_letter_queue: str | None = queues.UNSET,
        message_ttl: int | None = queues.UNSET,
        exist_ok: bool = False,
        max_payload_bytes: int = queues.UNSET,
    ) -> QueueInfo:
        """:meth:`QueueClient.create_queue`: a setting left out is not compared with an
        existing queue's (``exist_ok``)."""
        return await self._run(
            "create_queue",
            name,
            bucket_size=bucket_size,
            max_delivery_count=max_delivery_count,
            visibility_timeout=visibility_timeout,
            repair_timeout=repair_timeout,
            dead_letter_queue=dead_letter_queue,
            message_ttl=message_ttl,
            exist_ok=exist_ok,
            max_payload_bytes=max_payload_bytes,
        )

    async def update_queue(
        self,
        name: str,
        *,
        visibility_timeout: float = queues.UNSET,
        max_delivery_count: int = queues.UNSET,
        dead_letter_queue: str | None = queues.UNSET,
        message_ttl: int | None = queues.UNSET,
        max_payload_bytes: int = queues.UNSET,
        **other: Any,
    ) -> QueueInfo:
        return await self._run(
            "update_queue",
            name,
            visibility_timeout=visibility_timeout,
            max_delivery_count=max_delivery_count,
            dead_letter_queue=dead_letter_queue,
            message_ttl=message_ttl,
            max_payload_bytes=max_payload_bytes,
            **other,
        )

    async def get_queue(self, name: str) -> QueueInfo:
        return await self._run("get_queue", name)

    async def list_queues(self) -> list[QueueInfo]:
        return await self._run("list_queues")

    async def delete_queue(self, name: str) -> None:
        await self._run("delete_queue", name)

    # -- producing ------------------------------------------------------------------------------

    async def put(
        self,
        queue: str,
        payload: bytes | str,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        group: str | None = None,
    ) -> int:
        return await self._run(
            "put", queue, payload, delay=delay, headers=headers, dedup_id=dedup_id, group=group
        )

    async def put_many(
        self,
        queue: str,
        payloads: Iterable[bytes | str],
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
        dedup_ids: Sequence[str | None] | None = None,
        group: str | None = None,
    ) -> list[int]:
        return await self._run(
            "put_many",
            queue,
            payloads,
            delay=delay,
            headers=headers,
            dedup_ids=dedup_ids,
            group=group,
        )

    async def put_batch(self, queue: str, entries: Iterable[PutEntry]) -> list[int]:
        return await self._run("put_batch", queue, entries)

    # -- consuming ------------------------------------------------------------------------------

    async def get(self, queue: str, visibility_timeout: float | None = None) -> Message | None:
        return await self._run("get", queue, visibility_timeout=visibility_timeout)

    async def get_many(
        self,
        queue: str,
        max_messages: int = 10,
        visibility_timeout: float | None = None,
        wait_seconds: float = 0.0,
    ) -> list[Message]:
        """:meth:`QueueClient.get_many`; a long poll (``wait_seconds``) leaves the loop free."""
        return await self._run(
            "get_many",
            queue,
            max_messages=max_messages,
            visibility_timeout=visibility_timeout,
            wait_seconds=wait_seconds,
        )

    async def ack(self, queue: str, pop_receipt: str) -> bool:
        return await self._run("ack", queue, pop_receipt)

    async def ack_many(self, queue: str, pop_receipts: Iterable[str]) -> list[ReceiptResult]:
        return await self._run("ack_many", queue, pop_receipts)

    async def change_visibility(
        self, queue: str, pop_receipt: str, timeout: float, payload: bytes | str | None = None
    ) -> str:
        return await self._run("change_visibility", queue, pop_receipt, timeout, payload=payload)

    async def change_visibility_many(
        self, queue: str, entries: Iterable[tuple[str, float]]
    ) -> list[ReceiptResult]:
        return await self._run("change_visibility_many", queue, entries)

    async def give_back(self, queue: str, messages: Iterable[Message]) -> int:
        return await self._run("give_back", queue, messages)

    def consume(
        self,
        queue: str,
        batch: int = 10,
        wait: float = 20.0,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        stop_when_empty: bool = False,
    ) -> AsyncConsumeLoop:
        """``async for msg in client.consume(queue)``: :meth:`QueueClient.consume`'s loop
        (:class:`cassieq_spark.consume_loop.AsyncConsumeLoop`)."""
        return AsyncConsumeLoop(
            self, queue, batch, wait, visibility_timeout, heartbeat, stop_when_empty
        )

    async def worker(
        self, queue: str, handler: Callable[[Message], Awaitable[object]], **options: Any
    ) -> WorkerReport:
        """Run the coroutine ``handler`` on the messages of ``queue`` until stopped (SIGTERM,
        SIGINT) or, with ``stop_when_empty=True``, until the queue is empty; options and
        guarantees: :class:`cassieq_spark.async_worker.AsyncWorker`."""
        return await AsyncWorker(self, queue, handler, **options).run()

    # -- moving between queues -----------------------------------------------------------------

    async def redrive(
        self,
        dead_letter_queue: str,
        to: str,
        max_messages: int | None = None,
        visibility_timeout: float = 300.0,
        *,
        batch_size: int = DEFAULT_MOVE_BATCH,
        rate: float | None = None,
        progress: ProgressSink | None = None,
        one_at_a_time: bool = False,
    ) -> MoveReport:
        return await self._run(
            "redrive",
            dead_letter_queue,
            to,
            max_messages=max_messages,
            visibility_timeout=visibility_timeout,
            batch_size=batch_size,
            rate=rate,
            progress=progress,
            one_at_a_time=one_at_a_time,
        )

    async def move(
        self,
        queue: str,
        to: str,
        max_messages: int | None = None,
        visibility_timeout: float = 300.0,
        *,
        batch_size: int = DEFAULT_MOVE_BATCH,
        rate: float | None = None,
        progress: ProgressSink | None = None,
        one_at_a_time: bool = False,
    ) -> MoveReport:
        return await self._run(
            "move",
            queue,
            to,
            max_messages=max_messages,
            visibility_timeout=visibility_timeout,
            batch_size=batch_size,
            rate=rate,
            progress=progress,
            one_at_a_time=one_at_a_time,
        )

    async def purge(self, queue: str, progress: ProgressSink | None = None) -> PurgeReport:
        return await self._run("purge", queue, progress=progress)

    # -- looking ------------------------------------------------------------------------------

    async def peek(self, queue: str, limit: int = 10) -> list[Message]:
        return await self._run("peek", queue, limit=limit)

    async def stats(self, queue: str) -> dict:
        return await self._run("stats", queue)

    async def repair(
        self,
        queue: str,
        repair_timeout: float | None = None,
        dry_run: bool = False,
        progress: ProgressSink | None = None,
    ) -> RepairReport:
        return await self._run(
            "repair", queue, repair_timeout=repair_timeout, dry_run=dry_run, progress=progress
        )
