"""What one service instance holds: one Cassandra connection, a pool of queue clients on it,
the account store, its settings and metrics. Instances share nothing but Cassandra.

Engine calls block (the Cassandra driver is synchronous), so each runs on a worker thread with
a queue client of its own from the pool (a client's consumer caches are not meant for two
threads at once); at most ``workers`` run at a time, the others wait.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import secrets
import socket
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable

from ..client import QueueClient
from ..config import ConnectionConfig
from ..engine.consume.batch_ack import ReceiptResult
from ..engine.core.messages import Message
from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection
from ..errors import (
    ConfigError,
    ContentionError,
    PayloadTooLargeError,
    QueueBusyError,
    QueueNotFoundError,
    SchemaNotBootstrappedError,
)
from . import names
from .accounts import AccountStore, Sealer
from .ack_batcher import AckBatcher
from .batching import Batcher
from .config import ServiceConfig
from .get_batcher import GetBatcher
from .metrics import Metrics, StatsRefresher
from .put_batcher import PutBatcher
from .responses import ApiError, framework, invalid, not_found_queue

log = logging.getLogger(__name__)
T = TypeVar("T")

UNAVAILABLE = (NoHostAvailable, Unavailable, OperationTimedOut, ReadTimeout, WriteTimeout)


class Service:
    def __init__(self, config: ServiceConfig, connection: ConnectionConfig):
        self.config = config
        self.connection_config = connection
        self.instance = config.instance or f"{socket.gethostname()}-{secrets.token_hex(4)}"
        self.conn = Connection(connection)
        self.sealer = Sealer(config.secret_bytes())
        self.accounts = AccountStore(self.conn, self.sealer)
        self.metrics = Metrics(config.stats_seconds)
        self.refresher: StatsRefresher | None = None
        self.accounts.on_read = self.metrics.account_reads.inc
        self._pool: queue_mod.LifoQueue[QueueClient] = queue_mod.LifoQueue()
        for _ in range(config.workers):
            self._pool.put(QueueClient(connection, self.conn))
        self.limiter = anyio.CapacityLimiter(config.workers)
        self.draining = False
        self.puts = PutBatcher(self._put_many)
        self.gets: GetBatcher[Message] = GetBatcher(self._get_many, self.give_back)
        self.acks = AckBatcher(self._ack_many)
        # Requests of one queue that arrive while its definition is being read share the next
        # read: each is still answered by a read that started after it arrived (a queue deleted
        # before the request came is a 404), with one read per wave of requests, not per request.
        self._queue_reads: Batcher[str, None, QueueInfo] = Batcher(self._read_queue, 1000)

    async def _put_many(
        self, queue: str, payloads: Sequence[bytes], delay: float, group: str | None
    ) -> list[int]:
        self.metrics.put_writes.inc()
        return await self.call(
            lambda c: c.put_many(queue, payloads, delay=delay, group=group), "putMessage", queue
        )

    async def queue(self, name: str) -> QueueInfo:
        """The queue's definition, read from Cassandra after this call began
        (``QueueNotFoundError`` if it does not exist)."""
        return await self._queue_reads.submit(name, None)

    async def _read_queue(self, name: str, waiters: Sequence[None]) -> list[QueueInfo]:
        info = await self.call(lambda c: c.get_queue(name))
        return [info] * len(waiters)

    async def _get_many(self, queue: str, vt: float, n: int) -> list[Message]:
        self.metrics.get_reads.inc()
        return await self.call(
            lambda c: c.get_many(queue, n, visibility_timeout=vt), "getMessage", queue
        )

    async def give_back(self, queue: str, messages: Sequence[Message]) -> int:
        """Messages claimed for a client that left, visible again at once with the delivery
        not counted (a v1 get's or a v2 receive's)."""
        self.metrics.get_given_back.inc(len(messages))
        return await self.call(lambda c: c.give_back(queue, messages), "getMessage", queue)

    async def _ack_many(self, queue: str, receipts: Sequence[str]) -> list[ReceiptResult]:
        self.metrics.ack_writes.inc()
        return await self.call(lambda c: c.ack_many(queue, receipts), "AckMessage", queue)

    def start_stats(self) -> None:
        """Start refreshing the queue stats of ``/metrics`` and the dashboard in the background,
        on a client of their own (outside the pool and the worker threads)."""
        self.metrics.watch_queues(QueueClient(self.connection_config, self.conn))
        self.refresher = StatsRefresher(self.metrics)
        self.refresher.start()

    def stop_stats(self) -> None:
        if self.refresher is not None:
            self.refresher.stopped.set()
            self.refresher.join(timeout=2)  # a pass under way ends with the session

    def close(self) -> None:
        self.stop_stats()
        self.conn.shutdown()

    def with_client(self, fn: Callable[[QueueClient], T]) -> T:
        client = self._pool.get()
        try:
            return fn(client)
        finally:
            self._pool.put(client)

    async def call(
        self, fn: Callable[[QueueClient], T], operation: str = "", queue: str | None = None
    ) -> T:
        """``fn(client)`` on a worker thread; engine errors become API errors. ``queue`` (its
        engine name) is the queue ``fn`` acts on: when it is deleted while the request runs, the
        answer is that queue's 404, as if it had been gone when the request came.

        At most ``workers`` calls run at once; when ``max_waiting_calls`` already wait for one
        of them, this call is refused at once with 503 and ``Retry-After`` (shed early, rather
        than queue work, and the bodies it holds, without bound while Cassandra is slow)."""
        if (
            self.limiter.available_tokens < 1
            and self.limiter.statistics().tasks_waiting >= self.config.max_waiting_calls
        ):
            self.metrics.shed.labels("engine").inc()
            raise unavailable(
                f"{self.config.max_waiting_calls} engine calls already wait for one of "
                f"{self.config.workers} workers; retry"
            )
        try:
            return await anyio.to_thread.run_sync(self.with_client, fn, limiter=self.limiter)
        except ApiError:
            raise
        except QueueNotFoundError:
            if queue is None:
                raise
            owner = names.split(queue)
            raise not_found_queue(operation, owner[1] if owner else queue) from None
        except PayloadTooLargeError as exc:
            raise framework(413, str(exc)) from None
        except QueueBusyError as exc:
            raise ApiError(
                409, {"reason": "Conflict", "operation": operation, "message": str(exc)}
            ) from None
        except ConfigError as exc:
            raise invalid(str(exc)) from None
        except ContentionError as exc:
            raise unavailable(str(exc)) from None
        except SchemaNotBootstrappedError as exc:
            raise unavailable(str(exc)) from None
        except UNAVAILABLE as exc:
            log.warning("%s: Cassandra unavailable: %s", operation or "request", exc)
            raise unavailable("Cassandra did not answer in time; retry") from None

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """A plain blocking call (no client) on a worker thread, errors as :meth:`call`."""
        return await self.call(lambda _client: fn(*args))


def unavailable(detail: str) -> ApiError:
    err = framework(503, detail)
    err.headers["Retry-After"] = "1"
    return err
