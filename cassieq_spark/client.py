"""``QueueClient``: the whole queue API for code that is not Spark.

from cassieq_spark import QueueClient

with QueueClient.connect(["127.0.0.1"]) as q:
    q.bootstrap(create_keyspace=True)
    q.create_queue("jobs", exist_ok=True)
    q.put("jobs", b"hello")
    m = q.get("jobs")
    q.ack("jobs", m.pop_receipt)
"""

from __future__ import annotations

import functools
import itertools
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from cassandra import Unauthorized
from cassandra.auth import AuthProvider
from cassandra.cluster import Session

from . import validate
from .config import (
    ConnectionConfig,
    check_cluster,
    connection_from_options,
    delay_seconds,
    repair_timeout_seconds,
    visibility_seconds,
)
from .consume_loop import ConsumeLoop, Releaser
from .engine.consume import batch, batch_ack
from .engine.consume import consumer as consumer_mod
from .engine.consume.batch_ack import ReceiptResult
from .engine.consume.peek import peek as peek_messages
from .engine.core import queues
from .engine.core.counters import Counters
from .engine.core.messages import Message, check_headers, to_bytes
from .engine.core.progress import ProgressSink, start_task
from .engine.core.queues import DEFAULT_SETTINGS, QueueInfo
from .engine.core.stats import stats as queue_stats
from .engine.store import schema
from .engine.store.roles import create_app_role
from .engine.store.session import Connection
from .engine.upkeep.batch_moves import DEFAULT_BATCH as DEFAULT_MOVE_BATCH
from .engine.upkeep.batch_moves import move_in_batches, remaining_estimate
from .engine.upkeep.moves import MoveReport, move_messages
from .engine.upkeep.purge import PurgeReport
from .engine.upkeep.purge import purge as purge_queue
from .engine.upkeep.repair import RepairReport, repair_queue
from .engine.write.producer import DEDUP_WINDOW_SECONDS, enqueue, enqueue_deduplicated
from .errors import ClientClosedError, ConfigError, PermissionDeniedError
from .observability.client_metrics import timed
from .observability.trace import with_trace_context
from .observability.tracing import traced
from .worker import Worker, WorkerReport

log = logging.getLogger(__name__)

QUEUE_CACHE_SECONDS = 5.0
__all__ = ["DEDUP_WINDOW_SECONDS", "PutEntry", "QueueClient"]


@dataclass(frozen=True)
class PutEntry:
    """One message of :meth:`QueueClient.put_batch`: its payload, headers, initial delay in
    seconds, deduplication id and message group (None: none; see :meth:`QueueClient.put`)."""

    payload: bytes | str
    headers: Mapping[str, str] | None = None
    delay: float = 0.0
    dedup_id: str | None = None
    group: str | None = None


def _message_headers(headers: object, position: int | None = None) -> dict[str, str] | None:
    """A message's headers, checked, with the current span's trace context unless the caller
    gave a ``traceparent`` (a value that is not a mapping is left for the check to refuse)."""
    if headers is None or isinstance(headers, Mapping):
        headers = with_trace_context(headers)
    return check_headers(headers, position)


def _server_message(exc: Exception) -> str:
    """The server's own words from a driver error (``message="..."``), else the error."""
    text = str(exc)
    return text.split('message="', 1)[1].rstrip('"') if 'message="' in text else text


def check_app_role(config: ConnectionConfig, app_role: object, app_password: object) -> None:
    """What ``bootstrap(app_role=...)`` needs, checked before anything is created: a valid role
    name, a password, and a connection as a named role. A cluster a client reaches without a
    username has no password authentication (the driver cannot answer a password challenge
    without one), and there Cassandra's role manager refuses ``PASSWORD`` once the keyspace
    and schema have been made."""
    if (app_role is None) != (app_password is None):
        raise ConfigError("app_role and app_password go together: give both or neither")
    if app_role is None:
        return
    validate.role_name(app_role)
    if not app_password:
        raise ConfigError("the app role's password is empty: give a non-empty password")
    if config.username is None:
        raise ConfigError(
            f"app role {app_role!r} needs a cluster with password authentication "
            "(authenticator: PasswordAuthenticator) and an admin role to create it: connect "
            "with a username and password (--username, --password-file), or leave the app role "
            "out"
        )


def _session_hosts(session: object) -> tuple[str, ...]:
    """The hosts a caller's session knows, for messages (``describe()``); a placeholder when
    it knows none."""
    try:
        hosts = session.cluster.metadata.all_hosts()  # type: ignore[attr-defined]
        found = tuple(sorted({str(h.address) for h in hosts if h.address}))
    except Exception:  # not a session: Connection refuses it with a clear error
        found = ()
    return found or ("127.0.0.1",)


class QueueClient:
    """A connection to the queues of one keyspace. Thread-safe for puts; one per process is enough."""

    def __init__(self, config: ConnectionConfig, connection: Connection | None = None):
        self.config = config
        self._own = connection is None
        self.conn = connection or Connection(config)
        self.counters = Counters(self.conn)
        self._consumer = consumer_mod.Consumer(self.conn, self.counters)
        self._queues: dict[str, tuple[float, QueueInfo]] = {}
        self._releaser: Releaser | None = None
        self._releaser_lock = threading.Lock()

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def connect(
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
    ) -> QueueClient:
        """``secure_connect_bundle``: a managed service's bundle (Astra) instead of contact
        points, port and TLS (untested against a live service: docs/client.md).
        ``auth_provider``: any ``cassandra.auth.AuthProvider`` instead of username/password."""
        if isinstance(contact_points, str):
            contact_points = [h.strip() for h in contact_points.split(",") if h.strip()]
        if isinstance(contact_points, (list, tuple)):
            contact_points = tuple(contact_points)
        config = ConnectionConfig(
            contact_points=contact_points,  # type: ignore[arg-type]  # checked there
            port=port,
            keyspace=keyspace,
            local_dc=local_dc,
            username=username,
            password=password,
            consistency=consistency,
            serial_consistency=serial_consistency,
            ssl_enabled=ssl_context is not None,
            ssl_context_override=ssl_context,
            secure_connect_bundle=secure_connect_bundle,
            auth_provider=auth_provider,
        )
        return cls(config)

    @classmethod
    def from_session(
        cls,
        session: Session,
        keyspace: str = "cassieq",
        execution_profile: str | None = None,
        consistency: str = "LOCAL_QUORUM",
        serial_consistency: str = "LOCAL_SERIAL",
    ) -> QueueClient:
        """A client over a driver session you made (your own Cluster: load balancing, auth,
        TLS, a managed service's bundle). Statements run with a copy of the session's profile
        ``execution_profile`` (default: its default profile) with this client's consistency
        levels and retry policy. :meth:`close` leaves the session open: it is yours to shut
        down."""
        config = ConnectionConfig(
            contact_points=_session_hosts(session),
            port=getattr(getattr(session, "cluster", None), "port", 9042),
            keyspace=keyspace,
            consistency=consistency,
            serial_consistency=serial_consistency,
        )
        return cls(config, Connection(config, session=session, profile=execution_profile))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> QueueClient:
        """From Spark-style options: ``contactPoints``, ``port``, ``keyspace``, ``localDc``, ...;
        any other name is an error (a typo would otherwise be ignored)."""
        return cls(connection_from_options(options, known_only=True))

    def sibling(self) -> QueueClient:
        """Another client on this one's connection, with consumer caches of its own: what a
        second thread (or concurrent operation) uses, since a client's consumer caches are not
        meant for two at once. Closing it leaves the connection open."""
        return QueueClient(self.config, self.conn)

    def releaser(self) -> Releaser:
        """This client's releaser thread (started on first use): it settles the consume loops
        left without ``close()`` (:mod:`cassieq_spark.consume_loop`)."""
        with self._releaser_lock:
            if self._releaser is None:
                self._releaser = Releaser(self)
            return self._releaser

    def close(self) -> None:
        """Settle the consume loops handed to the releaser (waiting at most
        ``RELEASER_CLOSE_SECONDS``), then close the connection if this client made it."""
        with self._releaser_lock:
            releaser, self._releaser = self._releaser, None
        if releaser is not None:
            releaser.close()
        if self._own:
            self.conn.shutdown()

    def __enter__(self) -> QueueClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- schema and queues ----------------------------------------------------------------------

    def bootstrap(
        self,
        create_keyspace: bool = False,
        replication_factor: int | None = None,
        app_role: str | None = None,
        app_password: str | None = None,
        replication: Mapping[str, object] | str | None = None,
        tables_only: bool = False,
        progress: ProgressSink | None = None,
    ) -> int:
        """Create or migrate the schema. Idempotent. Returns the schema version.

        ``tables_only``: for services where keyspaces and roles are made elsewhere (Astra, a
        DBA's change process): create and migrate the tables of an existing keyspace, never a
        keyspace or a role; a missing keyspace is an error that names it.

        ``replication_factor`` (with ``create_keyspace``): of a new keyspace (default 1),
        refused before anything is created if the live nodes cannot serve it; for an existing
        keyspace, an error if it has another one (bootstrap never changes replication).
        ``replication`` instead: the whole replication map as CQL writes it (a dict or its
        JSON), e.g. ``{"class": "NetworkTopologyStrategy", "datacenter1": 3}`` for production.

        ``app_role``/``app_password``: also create that login role with SELECT and MODIFY on the
        keyspace only (enough for everything but schema changes; run this as an admin)."""
        if tables_only and (
            create_keyspace
            or app_role is not None
            or replication_factor is not None
            or replication is not None
        ):
            raise ConfigError(
                "tables_only (--no-create) creates tables only: drop create_keyspace, "
                "replication and app_role (--create-keyspace, --replication-factor, "
                "--replication, --app-role), or drop --no-create"
            )
        check_app_role(self.config, app_role, app_password)
        if tables_only:
            schema.require_keyspace(self.conn.session, self.config.keyspace)
        if (replication_factor is not None or replication is not None) and not create_keyspace:
            raise ConfigError(
                "a replication factor only applies when bootstrap creates the keyspace; add "
                "create_keyspace=True (--create-keyspace), or leave it out"
            )
        if replication_factor is not None and replication is not None:
            raise ConfigError(
                "give replication_factor (--replication-factor) or replication "
                "(--replication), not both"
            )
        replicas = None if replication is None else validate.replication(replication)
        task = start_task(progress, "bootstrap", self.config.keyspace, 4, unit="steps")
        try:
            if create_keyspace:
                schema.create_keyspace(
                    self.conn.session, self.config.keyspace, replication_factor, replicas
                )
            task.advance(1)
            version = schema.bootstrap(self.conn.session, self.config.keyspace)
            task.advance(1)
            # The keyspace may be new: the check made at connect time had nothing to look at.
            check_cluster(self.config, self.conn.cluster.metadata)
            task.advance(1)
            if app_role is not None and app_password is not None:
                create_app_role(self.conn.session, self.config.keyspace, app_role, app_password)
            task.advance(1)
            task.finish(schema_version=version)
        except Unauthorized as exc:
            who = f"role {self.config.username!r}" if self.config.username else "this client"
            raise PermissionDeniedError(
                f"{who} may not change the schema of keyspace {self.config.keyspace!r} "
                f"({_server_message(exc)}): bootstrap needs CREATE and ALTER on the keyspace "
                "(and CREATE on ALL KEYSPACES to create it, AUTHORIZE and CREATE on ALL ROLES for "
                "--app-role); run it as an admin role"
            ) from None
        return version

    @timed("create_queue")
    def create_queue(
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
        """Create queue ``name``; a setting not given gets its default
        (:data:`~cassieq_spark.engine.core.queues.DEFAULT_SETTINGS`: no dead-letter queue, no
        TTL). ``exist_ok``: an existing queue is returned as it is, but every setting given
        must be the queue's own (``dead_letter_queue=None`` too: the queue must have none); one
        that differs is :class:`~cassieq_spark.errors.QueueSettingsMismatchError` (a
        ``QueueExistsError``) naming each differing setting, never silently ignored."""
        if not isinstance(exist_ok, bool):
            raise ConfigError(f"exist_ok must be True or False, got {exist_ok!r}")
        for key, value in (
            ("visibility_timeout", visibility_timeout),
            ("repair_timeout", repair_timeout),
        ):
            if value is not queues.UNSET:
                validate.number(value, key)
        self._require_schema()
        asked = {
            "bucket_size": bucket_size,
            "max_delivery_count": max_delivery_count,
            "visibility_timeout": visibility_timeout,
            "repair_timeout": repair_timeout,
            "dead_letter_queue": dead_letter_queue,
            "message_ttl": message_ttl,
            "max_payload_bytes": max_payload_bytes,
        }
        given = [key for key, value in asked.items() if value is not queues.UNSET]
        settings = {
            key: getattr(DEFAULT_SETTINGS, key) if value is queues.UNSET else value
            for key, value in asked.items()
        }
        info = queues.create_queue(self.conn, name, exist_ok=exist_ok, compare=given, **settings)
        self._queues[name] = (time.monotonic(), info)
        return info

    @timed("update_queue")
    def update_queue(
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
        """Change settings of queue ``name`` while it is in use; returns the queue updated.
        Settings not given are kept; ``dead_letter_queue=None`` removes the dead-letter queue,
        ``message_ttl=None`` the TTL. A change applies from the next delivery on: messages
        in flight keep their visibility deadline, the delivery limit and dead-letter queue are
        checked at the next delivery, a new TTL and payload limit apply to messages put after
        it. Other clients see it within ``QUEUE_CACHE_SECONDS`` (5 s); this one at once."""
        if other:  # the engine names a setting fixed at creation, or no setting at all
            queues.update_queue(self.conn, name, **other)
        if visibility_timeout is not queues.UNSET:
            validate.number(visibility_timeout, "visibility_timeout")
        self._require_schema()
        info = queues.update_queue(
            self.conn,
            name,
            visibility_timeout=visibility_timeout,
            max_delivery_count=max_delivery_count,
            dead_letter_queue=dead_letter_queue,
            message_ttl=message_ttl,
            max_payload_bytes=max_payload_bytes,
        )
        self._queues[name] = (time.monotonic(), info)
        return info

    @timed("get_queue")
    def get_queue(self, name: str) -> QueueInfo:
        self._require_schema()
        info = queues.get_queue(self.conn, name)
        self._queues[name] = (time.monotonic(), info)
        return info

    @timed("list_queues")
    def list_queues(self) -> list[QueueInfo]:
        self._require_schema()
        return queues.list_queues(self.conn)

    @timed("delete_queue")
    def delete_queue(self, name: str) -> None:
        self._require_schema()
        queues.delete_queue(self.conn, name)
        self._queues.pop(name, None)

    def _queue(self, name: str) -> QueueInfo:
        self._require_open()
        validate.queue_name(name)  # before the cache: a list is no key of it
        cached = self._queues.get(name)
        if cached and time.monotonic() - cached[0] < QUEUE_CACHE_SECONDS:
            return cached[1]
        return self.get_queue(name)

    _schema_checked = False

    def _require_open(self) -> None:
        if self.conn.cluster.is_shutdown:
            raise ClientClosedError(
                f"this client of keyspace {self.config.keyspace!r} is closed (close() was "
                "called, or its session was shut down): nothing was sent; make a new client"
            )

    def _require_schema(self) -> None:
        self._require_open()
        if not self._schema_checked:
            schema.require_schema(self.conn)
            self._schema_checked = True

    # -- producing ------------------------------------------------------------------------------

    @timed("put")
    def put(
        self,
        queue: str,
        payload: bytes | str,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        group: str | None = None,
    ) -> int:
        """Enqueue one message; returns its id. ``dedup_id``: a put of the same id within
        ``DEDUP_WINDOW_SECONDS`` (5 min) of the first enqueues nothing and returns the first
        put's id, so a producer may retry after a timeout or a crash. With ``group``, the
        message is delivered after every message of its group put before it, and never while
        another message of the group is in flight (see docs/groups.md)."""
        ids = None if dedup_id is None else [dedup_id]
        return self.put_many(
            queue, [payload], delay=delay, headers=headers, dedup_ids=ids, group=group
        )[0]

    @timed("put_many")
    @traced("send")
    def put_many(
        self,
        queue: str,
        payloads: Iterable[bytes | str],
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
        dedup_ids: Sequence[str | None] | None = None,
        group: str | None = None,
    ) -> list[int]:
        """Enqueue many messages with one id reservation per 10,000; returns their ids in order.
        ``dedup_ids``: one deduplication id per payload (None: that one has none), as for
        :meth:`put`; each message with one costs its own reservation. With ``group``, all of
        them in that group, in the list's order (docs/groups.md); a grouped message cannot be
        delayed."""
        if isinstance(payloads, (bytes, bytearray, memoryview, str)):
            raise ConfigError(
                f"put_many takes an iterable of payloads, got one {type(payloads).__name__}; "
                "use put() for a single message, or wrap it in a list"
            )
        info = self._queue(queue)
        d = delay_seconds(delay)
        h = validate.grouped_headers(_message_headers(headers), group, d)
        data = [to_bytes(p, info, i) for i, p in enumerate(payloads)]
        ids: list[str | None] = [None] * len(data)
        if dedup_ids is not None:
            if isinstance(dedup_ids, (str, bytes, AbstractSet, Mapping)):
                raise ConfigError(
                    "put_many takes one deduplication id per payload (None for none), in the "
                    f"payloads' order: a list or tuple, got a {type(dedup_ids).__name__}"
                )
            given = list(itertools.islice(dedup_ids, len(data) + 1))
            if len(given) != len(data):
                more = "more than " if len(given) > len(data) else ""
                raise ConfigError(
                    "put_many takes one deduplication id per payload (None for none), got "
                    f"{more}{len(given) - (1 if more else 0)} for {len(data)} payloads"
                )
            ids = [
                None if x is None else validate.dedup_id(x, f"dedup_ids[{i}]")
                for i, x in enumerate(given)
            ]
        return self._write(info, data, [h] * len(data), [d] * len(data), ids)

    @timed("put_batch")
    @traced("send")
    def put_batch(self, queue: str, entries: Iterable[PutEntry]) -> list[int]:
        """Enqueue messages that each have their own headers, delay and deduplication id (a
        :class:`PutEntry` each); returns their ids in order. Every entry is checked before
        anything is written: a bad one names its position and nothing is enqueued."""
        info = self._queue(queue)
        entries = list(entries)
        data: list[bytes] = []
        heads: list[dict[str, str] | None] = []
        delays: list[float] = []
        ids: list[str | None] = []
        for i, e in enumerate(entries):
            if not isinstance(e, PutEntry):
                raise ConfigError(
                    f"put_batch entry {i} is a {type(e).__name__}, not a PutEntry; build each "
                    "with PutEntry(payload, headers=..., delay=..., dedup_id=...)"
                )
            data.append(to_bytes(e.payload, info, i))
            delay = delay_seconds(e.delay, f"delay of entry {i}")
            heads.append(
                validate.grouped_headers(_message_headers(e.headers, i), e.group, delay, i)
            )
            delays.append(delay)
            ids.append(
                None
                if e.dedup_id is None
                else validate.dedup_id(e.dedup_id, f"dedup_id of entry {i}")
            )
        return self._write(info, data, heads, delays, ids)

    def _write(
        self,
        info: QueueInfo,
        data: list[bytes],
        heads: list[dict[str, str] | None],
        delays: list[float],
        ids: list[str | None],
    ) -> list[int]:
        """Checked messages into the queue: the keyed write for those with a deduplication id,
        one reservation for the rest; their ids in order."""
        if not data:
            return []
        h = heads if any(heads) else None
        d = delays if any(delays) else None
        if any(x is not None for x in ids):
            return enqueue_deduplicated(self.conn, self.counters, info, data, ids, h, d)
        return enqueue(self.conn, self.counters, info, data, h, d)

    # -- consuming ------------------------------------------------------------------------------

    @timed("get")
    @traced("receive")
    def get(self, queue: str, visibility_timeout: float | None = None) -> Message | None:
        """The next visible message, hidden from others for the visibility timeout; None if empty."""
        info = self._queue(queue)
        vt = (
            info.visibility_timeout
            if visibility_timeout is None
            else visibility_seconds(visibility_timeout)
        )
        return self._consumer.get(info, vt)

    @timed("get_many")
    @traced("receive")
    def get_many(
        self,
        queue: str,
        max_messages: int = 10,
        visibility_timeout: float | None = None,
        wait_seconds: float = 0.0,
    ) -> list[Message]:
        """Up to ``max_messages`` (1 to 1,000) visible messages, each hidden from others for the
        visibility timeout. Waits up to ``wait_seconds`` (0 to 20) for a first one and returns
        as soon as there is one; an empty list when none came. Fresh messages cost one Paxos
        round per bucket (fewer messages per round after a race lost); redeliveries one each."""
        n = validate.max_messages(max_messages)
        wait = validate.wait_seconds(wait_seconds)
        info = self._queue(queue)
        vt = (
            info.visibility_timeout
            if visibility_timeout is None
            else visibility_seconds(visibility_timeout)
        )
        return batch.get_many(self._consumer, info, vt, n, wait)

    @timed("ack_many")
    @traced("ack")
    def ack_many(self, queue: str, pop_receipts: Iterable[str]) -> list[ReceiptResult]:
        """Ack up to 1,000 receipts at once; one :class:`ReceiptResult` per receipt, in order
        (``ok``, ``stale`` or ``invalid``): one bad receipt does not fail the others."""
        receipts = batch_ack.receipts_list(pop_receipts, "pop_receipts", "receipts")
        return batch_ack.ack_many(self._consumer, self._queue(queue), receipts)

    @timed("change_visibility_many")
    def change_visibility_many(
        self, queue: str, entries: Iterable[tuple[str, float]]
    ) -> list[ReceiptResult]:
        """``change_visibility`` for up to 1,000 ``(receipt, timeout)`` pairs; one result per
        pair, in order, with ``new_receipt`` when ``ok``."""
        pairs = batch_ack.visibility_pairs(entries)
        return batch_ack.change_visibility_many(self._consumer, self._queue(queue), pairs)

    @timed("give_back")
    def give_back(self, queue: str, messages: Iterable[Message]) -> int:
        """Messages this client received and will not use: each is visible again at once and
        its delivery is not counted (never nearer its dead-letter queue). Returns how many
        were given back; one whose receipt went stale meanwhile (its visibility timeout ended
        and another consumer has it) is left alone."""
        info = self._queue(queue)
        return sum(self._consumer.return_unused(info, m) for m in messages)

    @timed("ack")
    @traced("ack")
    def ack(self, queue: str, pop_receipt: str) -> bool:
        """True if this call acked the message; False for a stale or repeated receipt."""
        return self._consumer.ack(self._queue(queue), pop_receipt)

    @timed("change_visibility")
    def change_visibility(
        self, queue: str, pop_receipt: str, timeout: float, payload: bytes | str | None = None
    ) -> str:
        """Hide the message for ``timeout`` more seconds (0 releases it now, at most 12 hours);
        returns a new receipt. ``payload`` also replaces the message's body (within the
        queue's maximum size), in the same compare-and-set."""
        info = self._queue(queue)
        body = None if payload is None else to_bytes(payload, info)
        return self._consumer.change_visibility(
            info, pop_receipt, visibility_seconds(timeout, "timeout", zero=True), payload=body
        )

    def consume(
        self,
        queue: str,
        batch: int = 10,
        wait: float = 20.0,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        stop_when_empty: bool = False,
    ) -> ConsumeLoop:
        """``for msg in client.consume(queue)``: each message acked when the loop asks for the
        next, the one in hand released when the loop is left otherwise, hidden meanwhile by a
        heartbeat (:mod:`cassieq_spark.consume_loop`)."""
        return ConsumeLoop(self, queue, batch, wait, visibility_timeout, heartbeat, stop_when_empty)

    def worker(
        self, queue: str, handler: Callable[[Message], object], **options: Any
    ) -> WorkerReport:
        """Run ``handler`` on the messages of ``queue`` until stopped (SIGTERM, SIGINT) or,
        with ``stop_when_empty=True``, until the queue is empty; options and guarantees:
        :class:`cassieq_spark.worker.Worker`."""
        return Worker(self, queue, handler, **options).run()

    # -- moving between queues -----------------------------------------------------------------

    @timed("redrive")
    def redrive(
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
        """Move dead letters back to ``to``, each exactly once, keeping their provenance
        headers and counting redrives in ``cassieq-redrive-count``. ``dead_letter_queue`` must
        be some queue's dead-letter queue (else :meth:`move` is the call). Messages move
        ``batch_size`` at a time (1 to 1,000), at most ``rate`` per second (None: no limit);
        ``progress`` receives the counts as they grow; ``one_at_a_time``: the slower path
        that claims, writes and acks each message on its own (for comparison)."""
        source = self._queue(dead_letter_queue)
        if not any(q.dead_letter_queue == source.name for q in self.list_queues()):
            raise ConfigError(
                f"queue {source.name!r} is not the dead-letter queue of any queue: redrive "
                "moves dead letters back; use move (cassieq move) for the messages of another "
                "queue"
            )
        return self._move(
            dead_letter_queue,
            to,
            max_messages,
            visibility_timeout,
            redrive=True,
            batch_size=batch_size,
            rate=rate,
            progress=progress,
            one_at_a_time=one_at_a_time,
        )

    @timed("move")
    def move(
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
        """Move visible messages of ``queue`` to ``to``, each exactly once (header
        ``cassieq-moved-from`` names the source); the options are :meth:`redrive`'s."""
        return self._move(
            queue,
            to,
            max_messages,
            visibility_timeout,
            redrive=False,
            batch_size=batch_size,
            rate=rate,
            progress=progress,
            one_at_a_time=one_at_a_time,
        )

    @timed("purge")
    def purge(self, queue: str, progress: ProgressSink | None = None) -> PurgeReport:
        """Drop every message of ``queue`` written so far; producers may keep writing: nothing
        written after the purge starts is lost (docs/operations.md). ``progress``: the ids
        looked at so far."""
        return purge_queue(self.conn, self._queue(queue), progress)

    def _move(
        self,
        source: str,
        to: str,
        max_messages: int | None,
        vt: float,
        *,
        redrive: bool,
        batch_size: int,
        rate: float | None,
        progress: ProgressSink | None,
        one_at_a_time: bool,
    ) -> MoveReport:
        if max_messages is not None and (
            not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1
        ):
            raise ConfigError(
                f"max_messages must be a positive integer or None, got {max_messages!r}"
            )
        src, dst = self._queue(source), self._queue(to)
        hint = None
        if progress is not None and max_messages is None:
            hint = remaining_estimate(self.counters.read(src))
        mover: Callable[..., MoveReport] = (
            move_messages
            if one_at_a_time
            else functools.partial(move_in_batches, batch_size=batch_size, rate=rate)
        )
        return mover(
            self.conn,
            self.counters,
            self._consumer,
            src,
            dst,
            max_messages=max_messages,
            visibility_timeout=visibility_seconds(vt),
            redrive=redrive,
            progress=progress,
            total_hint=hint,
        )

    # -- looking ------------------------------------------------------------------------------

    @timed("peek")
    def peek(self, queue: str, limit: int = 10) -> list[Message]:
        """Up to ``limit`` messages that a get could return now. Changes nothing."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"limit must be a positive integer, got {limit!r}")
        return peek_messages(self._consumer, self._queue(queue), limit)

    @timed("stats")
    def stats(self, queue: str) -> dict:
        return queue_stats(self.conn, self.counters, self._queue(queue))

    @timed("repair")
    def repair(
        self,
        queue: str,
        repair_timeout: float | None = None,
        dry_run: bool = False,
        progress: ProgressSink | None = None,
    ) -> RepairReport:
        """One repair pass in this process (the Spark job `jobs/repair.py` does the same, spread)."""
        if repair_timeout is not None:
            repair_timeout = repair_timeout_seconds(repair_timeout)
        return repair_queue(
            self.conn,
            self.counters,
            self._queue(queue),
            repair_timeout=repair_timeout,
            dry_run=dry_run,
            progress=progress,
        )
