"""``client.worker(queue, handler)``: a pool of handler threads fed by one receiving loop.

Invariants:

- Every received message ends in exactly one of: acked (the handler returned), released with
  a backoff (the handler raised: hidden for ``backoff.delay(delivery_count)``, 1 s doubling to
  5 minutes by default, and redelivered after that), released for the dead-letter queue (the
  handler raised on the queue's last allowed delivery: visible at once, and the engine's next
  look moves it to the queue's dead-letter queue, or drops it when it has none), released on
  shutdown (visible at once), or stale (its receipt ran out before the handler finished,
  another consumer has it; with the heartbeat on, only when a renewal came too late).
  A process killed outright leaves its messages hidden until their visibility timeout
  ends; they are then delivered again. No path drops a message.
- With ``heartbeat=True`` (the default) a message's visibility is renewed while it waits and
  while its handler runs (:mod:`cassieq_spark.heartbeat`), so a handler may take longer than
  the visibility timeout.
- Only as many messages are received as there are idle handler threads: none waits unhandled.
- Acks of handlers that finish together go out in one ``ack_many``.
- ``stop()``, SIGTERM or SIGINT (when run on the main thread with ``handle_signals``) stop
  receiving at once; running handlers get ``shutdown_grace`` seconds to finish, and the
  messages of those still running after that are released (visible again at once). Handler
  threads are daemons: a handler stuck past the grace does not keep the process alive.

- A handler that raises ``SystemExit`` or ``KeyboardInterrupt`` stops the worker: its message
  is released (visible again at once), the others shut down as on SIGTERM, and :meth:`run`
  raises that exception once it has shut down. A handler that returns an awaitable (a
  coroutine function belongs to :class:`~cassieq_spark.async_worker.AsyncWorker`) has not
  handled its message: that is a failure, never an ack.
- Every option is checked when the worker is made (a handler that is not callable, or is a
  coroutine function, included), before any receive, thread or signal handler.

``stop_when_empty=True`` returns once no handler runs, no failed message waits out its backoff
(nor came due less than ``RETRY_SETTLE_SECONDS`` ago) and a receive came back empty.

Metrics: pass a :class:`WorkerMetrics` (override what you need); its methods run on handler
threads and must not raise.
"""

from __future__ import annotations

import inspect
import logging
import math
import queue as queue_mod
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import validate
from .engine.core.messages import Message
from .engine.core.queues import QueueInfo
from .errors import ConfigError, StaleReceiptError
from .heartbeat import Heartbeat

if TYPE_CHECKING:
    from .client import QueueClient
    from .engine.consume.batch_ack import ReceiptResult

log = logging.getLogger(__name__)

__all__ = [
    "Backoff",
    "CountingMetrics",
    "Worker",
    "WorkerMetrics",
    "WorkerOptions",
    "WorkerReport",
    "is_async_handler",
]

POLL_SLICE = 1.0  # seconds: the longest receive wait, so a stop is seen within about this


@dataclass(frozen=True)
class Backoff:
    """How long a failed message stays hidden before its next delivery:
    ``first * factor ** (delivery_count - 1)``, at most ``cap`` seconds."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        given = (self.first, self.factor, self.cap)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in given) or not (
            0 <= self.first <= self.cap <= 43_200 and 1 <= self.factor < math.inf
        ):  # NaN fails the comparisons too
            raise ConfigError(
                f"backoff needs numbers 0 <= first <= cap <= 43200 s and a finite factor >= 1, "
                f"got first="
                f"{self.first!r}, factor={self.factor!r}, cap={self.cap!r}"
            )

    def delay(self, delivery_count: int) -> float:
        steps = max(0, delivery_count - 1)
        if steps > 64:
            return self.cap
        return min(self.cap, self.first * self.factor**steps)


class WorkerMetrics:
    """Hooks called by a :class:`Worker`; each does nothing unless overridden."""

    def on_ack(self, message: Message, seconds: float) -> None:
        """Handled and acked; ``seconds`` from the handler's start to the ack."""

    def on_failure(self, message: Message, error: BaseException, retry_in: float) -> None:
        """The handler raised; the message comes back in ``retry_in`` seconds."""

    def on_dead_letter(self, message: Message, error: BaseException) -> None:
        """The handler raised on the queue's last allowed delivery: the message goes to the
        dead-letter queue (or is dropped when the queue has none) instead of coming back."""

    def on_stale(self, message: Message) -> None:
        """The handler finished after the message's receipt went stale (its visibility
        timeout ended): not acked here, another consumer gets it."""

    def on_release(self, message: Message) -> None:
        """Released unhandled at shutdown: visible again at once."""


@dataclass
class WorkerReport:
    """What a :meth:`Worker.run` did, counted."""

    acked: int = 0
    failed: int = 0
    dead_lettered: int = 0
    stale: int = 0
    released: int = 0
    latencies: list[float] = field(default_factory=list, repr=False)


RETRY_SETTLE_SECONDS = 3.0


class CountingMetrics(WorkerMetrics):
    """Counts into a :class:`WorkerReport`, then calls the user's hooks (one that raises is
    logged, never fails the worker)."""

    def __init__(self, report: WorkerReport, user: WorkerMetrics | None, lock: threading.Lock):
        self.report, self.user, self.lock = report, user, lock
        # When the last failed message released with a backoff is visible again: a worker
        # that stops when the queue is empty must not stop before it, or that message would
        # be left neither handled nor dead-lettered.
        self.retry_due = 0.0

    def retries_pending(self) -> bool:
        """A failed message is still waiting out its backoff (``time.monotonic`` clock), or came
        due less than ``RETRY_SETTLE_SECONDS`` ago: a message due again reaches a receive
        through its invisibility timer (or is dead-lettered there), which a receive right at
        its due time may not have passed yet."""
        with self.lock:
            return time.monotonic() < self.retry_due + RETRY_SETTLE_SECONDS

    def _call(self, name: str, *args: Any) -> None:
        if self.user is not None:
            try:
                getattr(self.user, name)(*args)
            except Exception:
                log.warning("worker metrics hook %s raised", name, exc_info=True)

    def on_ack(self, message: Message, seconds: float) -> None:
        with self.lock:
            self.report.acked += 1
            self.report.latencies.append(seconds)
        self._call("on_ack", message, seconds)

    def on_failure(self, message: Message, error: BaseException, retry_in: float) -> None:
        with self.lock:
            self.report.failed += 1
            self.retry_due = max(self.retry_due, time.monotonic() + retry_in)
        self._call("on_failure", message, error, retry_in)

    def on_dead_letter(self, message: Message, error: BaseException) -> None:
        with self.lock:
            self.report.dead_lettered += 1
        self._call("on_dead_letter", message, error)

    def on_stale(self, message: Message) -> None:
        with self.lock:
            self.report.stale += 1
        self._call("on_stale", message)

    def on_release(self, message: Message) -> None:
        with self.lock:
            self.report.released += 1
        self._call("on_release", message)

    # -- the outcomes of a worker's calls, counted the same way by both workers ------------------

    def acks_settled(
        self, taken: Sequence[tuple[Message, str, float]], results: Sequence[ReceiptResult]
    ) -> None:
        """``ack_many`` of ``(message, receipt, handler start)``: acked, or stale."""
        now = time.monotonic()
        for (m, _, started), res in zip(taken, results, strict=True):
            if res.ok:
                self.on_ack(m, now - started)
            else:
                self.on_stale(m)

    def releases_settled(
        self, entries: Sequence[tuple[Message, str]], results: Sequence[ReceiptResult]
    ) -> None:
        """``change_visibility_many(..., 0)`` at shutdown: released, or stale."""
        for (m, _), res in zip(entries, results, strict=True):
            if res.ok:
                self.on_release(m)
            else:
                self.on_stale(m)

    def failure_settled(self, m: Message, error: BaseException, delay: float | None) -> None:
        """A failed message made visible again after ``delay`` (None: at once, its last
        allowed delivery, for the dead-letter queue)."""
        if delay is None:
            self.on_dead_letter(m, error)
        else:
            self.on_failure(m, error, delay)


class WorkerOptions:
    """What both workers (handler threads here, tasks in :mod:`cassieq_spark.async_worker`) are
    configured with, checked once, and the decisions they share."""

    def __init__(
        self,
        queue: str,
        concurrency: int,
        batch: int | None,
        wait: float,
        visibility_timeout: float | None,
        heartbeat: bool,
        backoff: Backoff | None,
        metrics: WorkerMetrics | None,
        shutdown_grace: float,
        handle_signals: bool,
        stop_when_empty: bool,
    ):
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise ConfigError(
                f"backoff must be a Backoff (e.g. Backoff(first=1, factor=2, cap=300)) or None, "
                f"got {backoff!r}"
            )
        if metrics is not None and not isinstance(metrics, WorkerMetrics):
            raise ConfigError(
                f"metrics must be a WorkerMetrics (subclass it and override the hooks you "
                f"need) or None, got {metrics!r}"
            )
        for name, flag in (
            ("heartbeat", heartbeat),
            ("handle_signals", handle_signals),
            ("stop_when_empty", stop_when_empty),
        ):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name} must be True or False, got {flag!r}")
        # Every number checked here, before a receive, a thread or a signal handler exists.
        self.queue = queue
        self.concurrency = concurrency
        self.batch = (
            min(concurrency, validate.MAX_BATCH)
            if batch is None
            else validate.max_messages(batch, "batch")
        )
        self.wait = validate.wait_seconds(validate.number(wait, "wait"), "wait")
        self.visibility_timeout = (
            None
            if visibility_timeout is None
            else validate.visibility_seconds(
                validate.number(visibility_timeout, "visibility_timeout")
            )
        )
        self.heartbeat = heartbeat
        self.backoff = backoff or Backoff()
        self.shutdown_grace = validate.seconds(
            validate.number(shutdown_grace, "shutdown_grace"), "shutdown_grace"
        )
        self.handle_signals = handle_signals
        self.stop_when_empty = stop_when_empty
        self.report = WorkerReport()
        self.metrics = CountingMetrics(self.report, metrics, threading.Lock())
        # Set by take_queue_settings when the worker starts.
        self.receive_visibility = 0.0
        self.max_deliveries = 0

    def take_queue_settings(self, info: QueueInfo) -> None:
        """The visibility each receive asks for (the worker's own, else the queue's) and the
        queue's delivery limit, read once when the worker starts."""
        self.receive_visibility = (
            info.visibility_timeout if self.visibility_timeout is None else self.visibility_timeout
        )
        self.max_deliveries = info.max_delivery_count

    def failure_delay(self, m: Message) -> float | None:
        """How long a failed message stays hidden: its backoff, or None on the queue's last
        allowed delivery (visible at once, so the engine's next look dead-letters it)."""
        if m.delivery_count >= self.max_deliveries:
            return None
        return self.backoff.delay(m.delivery_count)

    def may_stop_empty(self, handlers_running: bool) -> bool:
        """A receive came back empty: with ``stop_when_empty``, stop unless a handler runs or
        a failed message is still to come back."""
        return self.stop_when_empty and not handlers_running and not self.metrics.retries_pending()


_RUNNING, _RELEASED = "running", "released"


def is_async_handler(handler: object) -> bool:
    """``handler`` is a coroutine function (``async def``, a partial of one, or an object whose
    ``__call__`` is one): calling it returns a coroutine to await."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    )


class Worker(WorkerOptions):
    """Runs ``handler(message)`` on ``concurrency`` threads for the messages of ``queue``
    (see the module for what happens to each message)."""

    def __init__(
        self,
        client: QueueClient,
        queue: str,
        handler: Callable[[Message], object],
        concurrency: int = 4,
        batch: int | None = None,
        wait: float = 20.0,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        backoff: Backoff | None = None,
        metrics: WorkerMetrics | None = None,
        shutdown_grace: float = 10.0,
        handle_signals: bool = True,
        stop_when_empty: bool = False,
    ):
        super().__init__(
            queue,
            concurrency,
            batch,
            wait,
            visibility_timeout,
            heartbeat,
            backoff,
            metrics,
            shutdown_grace,
            handle_signals,
            stop_when_empty,
        )
        if not callable(handler):
            raise ConfigError(
                f"handler must be a function taking a Message, got {handler!r}: every message "
                "would fail with it"
            )
        if is_async_handler(handler):
            raise ConfigError(
                f"handler {handler!r} is a coroutine function: the threaded Worker would never "
                "await it; run it with AsyncWorker (await AsyncQueueClient.worker(...))"
            )
        self.client = client
        self.handler = handler
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()
        # By delivery (the Message object), not message id: a message whose timeout ran out
        # may be delivered to this worker again while its first handler still runs.
        self._state: dict[int, str] = {}
        self._held: dict[int, Message] = {}
        self._acks: list[tuple[Message, str, float]] = []
        self._work: queue_mod.SimpleQueue[Message | None] = queue_mod.SimpleQueue()
        self._hb: Heartbeat | None = None
        # A handler's SystemExit or KeyboardInterrupt: the worker stops and run() raises it.
        self._exit: BaseException | None = None

    def stop(self) -> None:
        """Stop receiving; :meth:`run` then shuts down as on SIGTERM."""
        self._stop.set()

    def run(self) -> WorkerReport:
        self.take_queue_settings(self.client.get_queue(self.queue))
        restore = self._install_signals()
        vt = self.receive_visibility
        self._hb = Heartbeat(self.client, self.queue, vt) if self.heartbeat else None
        threads = [
            threading.Thread(target=self._serve, name=f"worker-{self.queue}-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        try:
            self._receive()
        finally:
            try:
                self._shut_down()
            finally:
                try:
                    for _ in threads:
                        self._work.put(None)
                    if self._hb is not None:
                        self._hb.close()
                finally:
                    restore()
        if self._exit is not None:
            raise self._exit
        return self.report

    # -- receiving ------------------------------------------------------------------------------

    def _receive(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while len(self._state) >= self.concurrency and not self._stop.is_set():
                    self._idle.wait(0.5)
                free = self.concurrency - len(self._state)
            if self._stop.is_set():
                return
            msgs = self.client.get_many(
                self.queue,
                min(self.batch, free),
                self.receive_visibility,
                min(self.wait, POLL_SLICE),
            )
            if self._stop.is_set():
                if msgs:
                    self.client.give_back(self.queue, msgs)
                return
            if not msgs:
                with self._lock:
                    running = bool(self._state)
                if self.may_stop_empty(running):
                    return
                continue
            if self._hb is not None:
                self._hb.hold(msgs)
            with self._lock:
                for m in msgs:
                    self._state[id(m)] = _RUNNING
                    self._held[id(m)] = m
            for m in msgs:
                self._work.put(m)

    # -- handling -------------------------------------------------------------------------------

    def _serve(self) -> None:
        client = self.client.sibling()  # consumer caches of this thread's own
        while True:
            m = self._work.get()
            if m is None:
                return
            try:
                self._handle(client, m)
            except Exception:  # a failed ack or release: the visibility timeout redelivers it
                log.warning("worker on queue %r: message %d", self.queue, m.id, exc_info=True)
                self._done(m)

    def _receipt(self, m: Message) -> str | None:
        """The message's current receipt, taken from the heartbeat (None: stale, or released
        at shutdown)."""
        with self._lock:
            if self._state.get(id(m)) != _RUNNING:
                return None
        return self._hb.drop(m) if self._hb is not None else m.pop_receipt

    def _done(self, m: Message) -> None:
        with self._lock:
            self._state.pop(id(m), None)
            self._held.pop(id(m), None)
            self._idle.notify_all()

    def _handle(self, client: QueueClient, m: Message) -> None:
        started = time.monotonic()
        try:
            result = self.handler(m)
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if close is not None:
                    close()  # never run: no "never awaited" warning besides this error
                raise TypeError(
                    f"handler {self.handler!r} returned an awaitable, which the threaded Worker "
                    "cannot run: the message was not handled; use AsyncWorker for coroutine "
                    "handlers"
                )
        except Exception as exc:
            self._failed(client, m, exc)
            return
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: stop the whole worker
            self._stopped_by(client, m, exc)
            return
        with self._lock:
            released = self._state.get(id(m)) != _RUNNING
        if released:
            return
        receipt = self._receipt(m)
        if receipt is None:
            self.metrics.on_stale(m)
            self._done(m)
            return
        with self._lock:
            self._acks.append((m, receipt, started))
        self._flush_acks(client)

    def _stopped_by(self, client: QueueClient, m: Message, exc: BaseException) -> None:
        """A handler raised SystemExit or KeyboardInterrupt: its message is released (visible
        again at once, its delivery counted), the worker stops as on SIGTERM, and
        :meth:`run` raises ``exc`` once it has shut down."""
        log.warning(
            "worker on queue %r: the handler raised %s on message %d; stopping",
            self.queue,
            type(exc).__name__,
            m.id,
        )
        with self._lock:
            if self._exit is None:
                self._exit = exc
        self._stop.set()
        try:
            receipt = self._receipt(m)
            if receipt is None:
                self.metrics.on_stale(m)
                return
            results = client.change_visibility_many(self.queue, [(receipt, 0.0)])
            self.metrics.releases_settled([(m, receipt)], results)
        finally:
            self._done(m)

    def _failed(self, client: QueueClient, m: Message, exc: Exception) -> None:
        with self._lock:
            if self._state.get(id(m)) != _RUNNING:
                return  # released at shutdown meanwhile
        receipt = self._receipt(m)
        if receipt is None:
            self.metrics.on_stale(m)
            self._done(m)
            return
        delay = self.failure_delay(m)
        try:
            client.change_visibility(self.queue, receipt, delay or 0.0)
        except StaleReceiptError:
            self.metrics.on_stale(m)
        else:
            self.metrics.failure_settled(m, exc, delay)
        finally:
            self._done(m)

    def _flush_acks(self, client: QueueClient) -> None:
        with self._lock:
            taken, self._acks = self._acks, []
        if not taken:
            return
        try:
            results = client.ack_many(self.queue, [r for _, r, _ in taken])
            self.metrics.acks_settled(taken, results)
        finally:
            for m, _, _ in taken:
                self._done(m)

    # -- stopping -------------------------------------------------------------------------------

    def _shut_down(self) -> None:
        deadline = time.monotonic() + self.shutdown_grace
        with self._lock:
            while self._state and time.monotonic() < deadline:
                self._idle.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            left = [m for m in self._held.values() if self._state.get(id(m)) == _RUNNING]
            for m in left:
                self._state[id(m)] = _RELEASED
        entries = []
        for m in left:
            receipt = self._hb.drop(m) if self._hb is not None else m.pop_receipt
            if receipt is not None:
                entries.append((m, receipt))
        if entries:
            results = self.client.change_visibility_many(self.queue, [(r, 0.0) for _, r in entries])
            self.metrics.releases_settled(entries, results)
        with self._lock:
            for m in left:
                self._state.pop(id(m), None)
                self._held.pop(id(m), None)

    def _install_signals(self) -> Callable[[], None]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, _frame: object) -> None:
            log.info("worker on queue %r: signal %d, shutting down", self.queue, signum)
            self._stop.set()

        for s in previous:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        return restore
