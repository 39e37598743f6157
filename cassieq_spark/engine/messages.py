"""Message rows: written in unlogged batches per bucket partition, pipelined; read by id range."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cassandra.query import BatchStatement, BatchType

from ..errors import ConfigError, PayloadTooLargeError
from . import timers as timer_rows
from .buckets import bucket_of, split_by_bucket
from .clock import from_epoch, to_epoch, utcnow
from .queues import QueueInfo
from .session import Connection

log = logging.getLogger(__name__)

# Cassandra warns above 5 KiB and fails above 50 KiB per batch by default: stay well below.
BATCH_MAX_BYTES = 24 * 1024
BATCH_MAX_ROWS = 64
IN_FLIGHT = 48  # concurrent requests per writer

_INSERT = (
    "INSERT INTO {ks}.messages (queue_id, bucket, id, payload, headers, enqueued_at, visible_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
)

COLUMNS = "id, payload, headers, enqueued_at, visible_at, version, deliveries, invisible_until, acked, dead"


@dataclass
class Message:
    """One delivered (or peeked) message."""

    id: int
    payload: bytes
    headers: dict[str, str] = field(default_factory=dict)
    pop_receipt: str | None = None
    delivery_count: int = 0
    enqueued_at: dt.datetime | None = None

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8")

    def as_dict(self) -> dict:
        try:
            payload = self.payload.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError:
            import base64

            payload = base64.b64encode(self.payload).decode("ascii")
            encoding = "base64"
        return {
            "id": self.id,
            "payload": payload,
            "encoding": encoding,
            "headers": self.headers,
            "pop_receipt": self.pop_receipt,
            "delivery_count": self.delivery_count,
            "enqueued_at": self.enqueued_at.isoformat() if self.enqueued_at else None,
        }


def to_bytes(
    payload: bytes | bytearray | memoryview | str, queue: QueueInfo, position: int | None = None
) -> bytes:
    if isinstance(payload, str):
        data = payload.encode("utf-8")
    elif isinstance(payload, (bytes, bytearray, memoryview)):
        data = bytes(payload)
    else:
        where = f" at position {position}" if position is not None else ""
        raise ConfigError(f"payload{where} must be bytes or str, got {type(payload).__name__}")
    if len(data) > queue.max_payload_bytes:
        where = f" at position {position}" if position is not None else ""
        raise PayloadTooLargeError(
            f"payload{where} has {len(data)} bytes; queue {queue.name!r} allows at most "
            f"{queue.max_payload_bytes} (max_payload_bytes)"
        )
    return data


def check_headers(headers: object, position: int | None = None) -> dict[str, str] | None:
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        where = f" at position {position}" if position is not None else ""
        raise ConfigError(f"headers{where} must be a dict of str to str")
    return dict(headers) or None


class Pipeline:
    """Keeps up to ``IN_FLIGHT`` requests running; raises the first failure on ``drain``."""

    def __init__(self, conn: Connection, in_flight: int = IN_FLIGHT):
        self.conn = conn
        self.limit = in_flight
        self.futures: list = []

    def submit(self, statement, params=None) -> None:
        if len(self.futures) >= self.limit:
            # Waiting on the oldest keeps ordering simple and the window full.
            self.futures.pop(0).result()
        self.futures.append(self.conn.session.execute_async(statement, params))

    def drain(self) -> None:
        futures, self.futures = self.futures, []
        error = None
        for f in futures:
            try:
                f.result()
            except Exception as exc:  # wait for all, then report the first
                error = error or exc
        if error is not None:
            raise error


def write_messages(
    conn: Connection,
    queue: QueueInfo,
    first_id: int,
    payloads: Sequence[bytes],
    headers: Sequence[dict[str, str] | None] | None = None,
    delays: Sequence[float] | None = None,
    enqueued_at: dt.datetime | None = None,
    pipeline: Pipeline | None = None,
) -> int:
    """Write ``payloads`` as ids ``first_id, first_id + 1, ...``. Upserts: rewriting is harmless.

    Payloads must already be bytes within the size limit. Delayed messages also get a timer
    so they come back when due even after readers have passed their id.
    """
    stmt = conn.prepare(_INSERT)
    now_dt = enqueued_at or utcnow()
    now = to_epoch(now_dt)
    qid, size, ttl = queue.queue_id, queue.bucket_size, queue.ttl
    pipe = pipeline or Pipeline(conn)
    n = len(payloads)
    timers: list[tuple[float, int]] = []
    for _bucket, lo, hi in split_by_bucket(first_id, first_id + n, size):
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        rows = nbytes = 0
        for mid in range(lo, hi):
            i = mid - first_id
            visible_at = None
            if delays is not None and delays[i]:
                due = now + delays[i]
                visible_at = from_epoch(due)
                timers.append((due, mid))
            h = headers[i] if headers is not None else None
            data = payloads[i]
            if rows and (rows >= BATCH_MAX_ROWS or nbytes + len(data) > BATCH_MAX_BYTES):
                pipe.submit(batch)
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                rows = nbytes = 0
            batch.add(stmt, (qid, bucket_of(mid, size), mid, data, h, now_dt, visible_at, ttl))
            rows += 1
            nbytes += len(data) + 64
        if rows:
            pipe.submit(batch)
    for due, mid in timers:
        for bound in timer_rows.statements(conn, queue, due, mid):
            pipe.submit(bound)
    if pipeline is None:
        pipe.drain()
    return n


def read_range(
    conn: Connection, queue: QueueInfo, lo: int, hi: int, columns: str = COLUMNS
) -> Iterator:
    """Rows with ids in ``[lo, hi)``, in id order, bucket by bucket."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
    )
    for bucket, blo, bhi in split_by_bucket(lo, hi, queue.bucket_size):
        yield from conn.session.execute(stmt, (queue.queue_id, bucket, blo, bhi))


def read_one(conn: Connection, queue: QueueInfo, message_id: int, columns: str = COLUMNS):
    return conn.execute(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
        (queue.queue_id, bucket_of(message_id, queue.bucket_size), message_id),
    ).one()
