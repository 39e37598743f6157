"""Message rows: written in unlogged batches per bucket partition, pipelined; read by id range."""

from __future__ import annotations

import datetime as dt
import logging
import math
import struct
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from operator import itemgetter

from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, BoundStatement

from ... import validate
from ...config import MAX_DELAY_SECONDS
from ...errors import ConfigError, PayloadTooLargeError
from ..store.session import Connection, EncodedBatch, EncodedStatements
from . import timers as timer_rows
from .buckets import bucket_of, split_by_bucket
from .clock import from_epoch, to_epoch, utcnow
from .queues import QueueInfo

log = logging.getLogger(__name__)

# Rows with headers or delays go in batches of at most this many bytes and rows. Cassandra's
# batch size thresholds (5 KiB warn, 50 KiB fail) apply to batches across partitions only;
# every batch here is one bucket's partition.
BATCH_MAX_BYTES = 24 * 1024
BATCH_MAX_ROWS = 128
# Plain rows (encode_plain_rows) go in larger batches: a request costs the writer's Python
# a fixed amount (the driver's future, query plan, send), so fewer requests is less CPU per
# row (measured: a third less at 1 KiB than with the limits above). 48 requests in flight
# hold at most 6 MiB, and a batch stays far below a mutation's limit (half a commit log
# segment, 16 MiB by default).
PLAIN_BATCH_MAX_BYTES = 128 * 1024
PLAIN_BATCH_MAX_ROWS = 256
IN_FLIGHT = 48  # concurrent requests per writer
# What the requests of one caller may carry of message bodies at once, reads and writes alike.
# A node holds a body several times over while it serves it (the row, the result set, the
# frame), so a reply of 16 MiB costs a node about 100 MiB of heap for a moment; the 1 GiB heap
# of `make cassandra-up` takes that with room to spare next to its memtables (256 MiB).
# Reads of bodies are sized from the queue's max_payload_bytes (see rows_per_read): a queue
# of small messages should say so to be read in large pages.
BODY_BUDGET_BYTES = 16 * 1024 * 1024
DEFAULT_PAGE_ROWS = 5000  # the driver's page size, for reads without bodies

_INSERT = (
    "INSERT INTO {ks}.messages "
    "(queue_id, bucket, id, payload, headers, grp, enqueued_at, visible_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
)
# A message's group: the reserved header, also stored in the row's ``grp`` column (see
# engine/consume/groups.py).
HEADER_GROUP = validate.HEADER_GROUP
# A copy of a message (dead-letter move, repair's republish) names where it came from.
HEADER_ORIGIN_QUEUE = "cassieq-origin-queue"
HEADER_ORIGIN_ID = "cassieq-origin-id"

COLUMNS = "id, payload, headers, enqueued_at, visible_at, version, deliveries, invisible_until, acked, dead"
# Headers travel in the same mutation as the payload: together they must stay below
# Cassandra's mutation size limit (see queues.MAX_PAYLOAD_LIMIT).
MAX_HEADERS_BYTES = validate.MAX_HEADERS_BYTES

# Values of ``moved``: why a row marked dead left the queue, and whether its copy is written.
# The compare-and-set that marks the row comes first (so a late ack or claim cannot also win),
# the copy second, keyed by the original id; the marker lets whoever finds it finish the copy.
MOVED_DLQ = "dlq"  # dead-lettered; the copy may not be written yet
MOVED_DLQ_DONE = "dlq-copied"
MOVED_DLQ_MISSING = "dlq-missing"  # its dead-letter queue was deleted: dropped, counted
MOVED_REPAIR = "repair"  # in a skipped range, republished by repair (done with the range)


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

    @property
    def group(self) -> str | None:
        """The message's group (header ``cassieq-group``), None for an ungrouped message."""
        return self.headers.get(HEADER_GROUP)

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
            "group": self.group,
            "pop_receipt": self.pop_receipt,
            "delivery_count": self.delivery_count,
            "enqueued_at": self.enqueued_at.isoformat() if self.enqueued_at else None,
        }


def to_bytes(
    payload: bytes | bytearray | memoryview | str, queue: QueueInfo, position: int | None = None
) -> bytes:
    if isinstance(payload, str):
        where = f" at position {position}" if position is not None else ""
        data = validate.text(payload, f"payload{where}")
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


def is_done(row, reader: int) -> bool:
    """Nothing more will be delivered for this message row: acked, dead, or consumed by a
    streaming query (never delivered to a client, not delayed, and behind the reader pointer,
    which a streaming query moves only over what Spark committed). Needs the columns
    ``id, version, visible_at, acked, dead``."""
    return bool(
        row.acked
        or row.dead
        or (row.version is None and row.visible_at is None and row.id < reader)
    )


def is_expired(row, queue: QueueInfo, now: float) -> bool:
    """The message's TTL has passed: its payload is gone (or about to be); never deliver it.

    ``enqueued_at`` is written with the payload, under the same TTL: a row without it only
    holds cells written later (a delivery, an ack), never a message."""
    if row.enqueued_at is None:
        return True
    return bool(queue.ttl) and to_epoch(row.enqueued_at) + queue.ttl <= now


def remaining_ttl(row, queue: QueueInfo, now: float) -> int:
    """The TTL for a write to an existing message row: what is left of the message's own, so
    that cells written after the insert (delivery, ack) expire with its payload, not after it.
    0 (no TTL) for queues without a message TTL. Needs ``enqueued_at``."""
    if not queue.ttl:
        return 0
    left = to_epoch(row.enqueued_at) + queue.ttl - now if row.enqueued_at is not None else 0
    return max(1, math.ceil(left))


def rows_per_read(queue: QueueInfo) -> int:
    """How many message rows one read of bodies may ask for: as many of the queue's largest
    messages (max_payload_bytes plus the largest headers) as fit in :data:`BODY_BUDGET_BYTES`,
    at least one (a lone row never exceeds the budget: queues.MAX_PAYLOAD_LIMIT is below it)."""
    largest = queue.max_payload_bytes + MAX_HEADERS_BYTES
    return max(1, min(DEFAULT_PAGE_ROWS, BODY_BUDGET_BYTES // largest))


def has_bodies(columns: str) -> bool:
    """True when a read of ``columns`` returns payloads (and so is sized by rows_per_read)."""
    return "payload" in (c.strip() for c in columns.split(","))


def check_headers(headers: object, position: int | None = None) -> dict[str, str] | None:
    return validate.headers(headers, position)


class Pipeline:
    """Keeps up to ``IN_FLIGHT`` requests running, and no more than :data:`BODY_BUDGET_BYTES`
    of the sizes given to ``submit`` (one request alone may exceed it); raises the first
    failure on ``drain``."""

    def __init__(self, conn: Connection, in_flight: int = IN_FLIGHT):
        self.conn = conn
        self.limit = in_flight
        self.futures: deque = deque()
        self.sizes: deque[int] = deque()
        self.in_flight_bytes = 0

    def submit(self, statement, params=None, nbytes: int = 0) -> None:
        while self.futures and (
            len(self.futures) >= self.limit or self.in_flight_bytes + nbytes > BODY_BUDGET_BYTES
        ):
            # Waiting on the oldest keeps ordering simple and the window full.
            self.in_flight_bytes -= self.sizes.popleft()
            self.futures.popleft().result()
        self.futures.append(self.conn.execute_async(statement, params))
        self.sizes.append(nbytes)
        self.in_flight_bytes += nbytes

    def drain(self) -> None:
        futures, self.futures = self.futures, deque()
        self.sizes.clear()
        self.in_flight_bytes = 0
        error = None
        for f in futures:
            try:
                f.result()
            except Exception as exc:  # wait for all, then report the first
                error = error or exc
        if error is not None:
            raise error


_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


def _timestamp_bytes(value: dt.datetime) -> bytes:
    return _INT64.pack(round(to_epoch(value) * 1000))


def map_bytes(headers: dict[str, str]) -> bytes:
    """A frozen map<text, text> in the native protocol (v3+) encoding."""
    parts = [_INT32.pack(len(headers))]
    for k, v in headers.items():
        kb, vb = k.encode("utf-8"), v.encode("utf-8")
        parts += (_INT32.pack(len(kb)), kb, _INT32.pack(len(vb)), vb)
    return b"".join(parts)


_SHORT = struct.Struct(">H")
_UNSET = _INT32.pack(-2)  # a value sent as unset: the cell is left alone, no tombstone
ROW_OVERHEAD_BYTES = 64  # what a row costs a batch beyond its payload and headers


@dataclass(frozen=True)
class EncodedRows:
    """Rows ``lo``..``hi - 1`` (offsets into the payloads) of one bucket, encoded as the
    statements of one batch (:class:`EncodedStatements`), and the bytes they count against
    the batch and the pipeline's limits."""

    bucket: int
    lo: int
    hi: int
    nbytes: int
    statements: EncodedStatements


def encode_plain_rows(
    query_id: bytes,
    queue_id: bytes,
    first_id: int,
    payloads: Sequence[bytes],
    bucket_size: int,
    enqueued_at: bytes,
    ttl: bytes,
    query: str = "",
) -> Iterator[EncodedRows]:
    """``payloads`` (no headers, no delays) as ids ``first_id, first_id + 1, ...``: the
    statements of ``_INSERT`` bound to (queue id, bucket, id, payload, unset, unset,
    ``enqueued_at``, unset, ``ttl``), in batches of one bucket each, at most
    :data:`PLAIN_BATCH_MAX_ROWS` rows and :data:`PLAIN_BATCH_MAX_BYTES` (counted as
    :func:`write_messages` counts a row: payload plus :data:`ROW_OVERHEAD_BYTES`), a row alone
    past it; ``query``: the statement's text, kept beside them). The bytes are the driver's encoding of the same values; each batch is built by
    a handful of calls whose loops over rows run in C (``struct``, ``bytes.join`` over
    ``zip``), no Python code per row."""
    n = len(payloads)
    head_row = (
        b"\x01"
        + _SHORT.pack(len(query_id))
        + query_id
        + _SHORT.pack(9)
        + _INT32.pack(16)
        + queue_id
        + _INT32.pack(8)
    )
    tail_row = _UNSET + _UNSET + _INT32.pack(8) + enqueued_at + _UNSET + _INT32.pack(4) + ttl
    lengths = list(map(len, payloads))
    # cost[i]: what rows 0..i-1 count against a batch, as write_messages counts them
    cost = list(accumulate(map(ROW_OVERHEAD_BYTES.__add__, lengths), initial=0))
    for bucket, blo, bhi in split_by_bucket(first_id, first_id + n, bucket_size):
        head = head_row + _INT64.pack(bucket) + _INT32.pack(8)  # then the id, the payload
        i, end = blo - first_id, bhi - first_id
        while i < end:
            last = min(end, i + PLAIN_BATCH_MAX_ROWS)
            j = max(i + 1, bisect_right(cost, cost[i] + PLAIN_BATCH_MAX_BYTES, i + 1, last + 1) - 1)
            k = j - i
            # each row's id and its payload's length, 12 bytes a row, then cut per row
            pairs = struct.pack(
                ">" + "qi" * k,
                *chain.from_iterable(
                    zip(range(first_id + i, first_id + j), lengths[i:j], strict=True)
                ),
            )
            cuts = map(
                pairs.__getitem__, map(slice, range(0, 12 * k, 12), range(12, 12 * k + 12, 12))
            )
            body = b"".join(
                chain.from_iterable(
                    zip(repeat(head, k), cuts, payloads[i:j], repeat(tail_row, k), strict=True)
                )
            )
            yield EncodedRows(bucket, i, j, cost[j] - cost[i], EncodedStatements(k, body, query))
            i = j


def _write_plain(
    conn: Connection,
    stmt,
    queue: QueueInfo,
    first_id: int,
    payloads: Sequence[bytes],
    now_b: bytes,
    ttl_b: bytes,
    pipe: Pipeline,
) -> None:
    """Rows without headers or delays, sent as :class:`EncodedBatch` (see
    :func:`encode_plain_rows`)."""
    qid_b = queue.queue_id.bytes
    bucket = None
    route: bytes = b""
    keyspace = None
    for rows in encode_plain_rows(
        stmt.query_id, qid_b, first_id, payloads, queue.bucket_size, now_b, ttl_b, stmt.query_string
    ):
        if rows.bucket != bucket:
            # The bucket's partition, as the driver routes a bound row of it.
            bucket = rows.bucket
            bound = BoundStatement(stmt)
            bound.values = [qid_b, _INT64.pack(bucket)] + [UNSET_VALUE] * 7
            route, keyspace = bound.routing_key, bound.keyspace
        batch = EncodedBatch(rows.statements, route, keyspace)
        # Upserts of rows at ids this writer reserved: sending one twice is harmless,
        # so the retry policy may re-send it after a timeout or a lost connection.
        batch.is_idempotent = True
        pipe.submit(batch, nbytes=rows.nbytes)


def write_messages(
    conn: Connection,
    queue: QueueInfo,
    first_id: int,
    payloads: Sequence[bytes],
    headers: Sequence[dict[str, str] | None] | None = None,
    delays: Sequence[float] | None = None,
    enqueued_at: dt.datetime | None = None,
    pipeline: Pipeline | None = None,
    encoded: bool = False,
) -> int:
    """Write ``payloads`` as ids ``first_id, first_id + 1, ...``. Upserts: rewriting is harmless.

    Payloads must already be bytes within the size limit. Delayed messages also get a timer
    so they come back when due even after readers have passed their id. Timers are written
    (and waited for) before the rows: a writer that dies mid-block never leaves a delayed row
    without its timer; a timer without its row is skipped by readers.

    This is the sink's hot path. Values are serialized here rather than by the driver's
    ``bind`` (which re-encodes the constant queue id, timestamp and TTL for every row); absent
    headers and delays are sent as *unset*, not null, which would write a tombstone per cell.

    ``encoded``: rows without headers or delays go as :func:`encode_plain_rows` batches (the
    sink's keyed writes ask for it; other callers keep the per-row path).
    """
    stmt = conn.prepare(_INSERT)
    query_id = stmt.query_id
    now_dt = enqueued_at or utcnow()
    now = to_epoch(now_dt)
    size = queue.bucket_size
    qid_b = queue.queue_id.bytes
    now_b = _timestamp_bytes(now_dt)
    ttl_b = _INT32.pack(queue.ttl)
    pack64 = _INT64.pack
    pipe = pipeline or Pipeline(conn)
    n = len(payloads)
    if delays is not None:
        longest = max(delays, default=0.0)
        if longest > MAX_DELAY_SECONDS:
            raise ConfigError(
                f"a delay of {longest} seconds is longer than the maximum, {MAX_DELAY_SECONDS:g}"
            )
        timers = [(now + d, first_id + i) for i, d in enumerate(delays) if d]
        if timers:
            for bound in timer_rows.many_statements(conn, queue, timers, to_epoch(utcnow())):
                pipe.submit(bound)
            pipe.drain()
    if (
        encoded
        and conn.encodes_batches
        and (headers is None or not any(headers))
        and (delays is None or not any(delays))
    ):
        # The sink's usual rows: encoded a batch at a time, no Python code per row.
        _write_plain(conn, stmt, queue, first_id, payloads, now_b, ttl_b, pipe)
        if pipeline is None:
            pipe.drain()
        return n
    last_h: dict | None = None  # put_many and the sink often repeat one headers dict
    last_hb = UNSET_VALUE
    last_hn = 0
    last_g = UNSET_VALUE  # the group (header HEADER_GROUP) in its own column, for the scans
    for bucket, lo, hi in split_by_bucket(first_id, first_id + n, size):
        bucket_b = pack64(bucket)
        batch: BatchStatement | None = None
        rows = nbytes = 0
        for mid in range(lo, hi):
            i = mid - first_id
            visible_b = UNSET_VALUE
            if delays is not None and delays[i]:
                visible_b = _timestamp_bytes(from_epoch(now + delays[i]))
            h = headers[i] if headers is not None else None
            if h is not last_h:
                last_h, last_hb = h, (map_bytes(h) if h else UNSET_VALUE)
                last_hn = len(last_hb) if h else 0
                g = h.get(HEADER_GROUP) if h else None
                last_g = g.encode("utf-8") if g is not None else UNSET_VALUE
            data = payloads[i]
            # A batch is sized by all it carries: payloads plus headers (finding P10: batches
            # of rows each accepted alone went past the 16 MiB frame on headers).
            row_bytes = len(data) + last_hn + ROW_OVERHEAD_BYTES
            values = [
                qid_b,
                bucket_b,
                pack64(mid),
                data,
                last_hb,
                last_g,
                now_b,
                visible_b,
                ttl_b,
            ]
            if batch is None or rows >= BATCH_MAX_ROWS or nbytes + row_bytes > BATCH_MAX_BYTES:
                if batch is not None:
                    pipe.submit(batch, nbytes=nbytes)
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                # Upserts of rows at ids this writer reserved: sending one twice is harmless,
                # so the retry policy may re-send it after a timeout or a lost connection.
                batch.is_idempotent = True
                # The first row goes through the public API: it sets the batch's routing key
                # (the bucket's partition) for token-aware routing.
                bound = BoundStatement(stmt)
                bound.values = values
                batch.add(bound)
                rows, nbytes = 1, row_bytes
                continue
            batch._add_statement_and_params(True, query_id, values)
            rows += 1
            nbytes += row_bytes
        if batch is not None:
            pipe.submit(batch, nbytes=nbytes)
    if pipeline is None:
        pipe.drain()
    return n


class PageSizer:
    """How many rows the next page of a read of bodies asks for.

    The first page asks for :func:`rows_per_read` rows: what fits the body budget even if every
    row is as large as the queue allows. Later pages follow the bodies actually seen: twice the
    largest row so far must fit the budget, and a page grows at most fourfold over the one
    before, up to the driver's usual 5,000 rows. A queue of small messages is so read in large
    pages after a few small ones, while a run of large rows keeps pages small. The bound is on
    what was seen: a page of small rows followed by rows at the maximum can carry up to its row
    count times the maximum, so the guarantee for every read is :func:`rows_per_read`, the
    growth is an estimate.
    """

    GROWTH = 4
    ROW_FLOOR_BYTES = 1024  # below this a row's size is not what limits a page

    def __init__(self, queue: QueueInfo):
        self.floor = rows_per_read(queue)
        self.rows = self.floor
        self.largest = 0

    def saw(self, rows: Sequence) -> None:
        for r in rows:
            size = len(getattr(r, "payload", None) or b"")
            headers = getattr(r, "headers", None)
            if headers:
                size += sum(len(k) + len(v) for k, v in headers.items())
            if size > self.largest:
                self.largest = size
        self._grow()

    def saw_tuples(self, rows: Sequence[tuple], at_payload: int, at_headers: int | None) -> None:
        """:meth:`saw` for a page of plain tuples (the payload at ``at_payload``, the headers at
        ``at_headers`` or none): the same sizes, with a Python step per row only for rows with
        headers."""
        payloads = map(itemgetter(at_payload), rows)
        largest = max(map(len, filter(None, payloads)), default=0)
        if at_headers is not None:
            for r in filter(itemgetter(at_headers), rows):
                h = r[at_headers]
                size = len(r[at_payload] or b"") + sum(len(k) + len(v) for k, v in h.items())
                largest = max(largest, size)
        self.largest = max(self.largest, largest)
        self._grow()

    def _grow(self) -> None:
        fits = BODY_BUDGET_BYTES // (2 * max(self.largest, self.ROW_FLOOR_BYTES))
        self.rows = max(self.floor, min(DEFAULT_PAGE_ROWS, self.rows * self.GROWTH, fits))


def read_range(
    conn: Connection, queue: QueueInfo, lo: int, hi: int, columns: str = COLUMNS
) -> Iterator:
    """Rows with ids in ``[lo, hi)``, in id order, bucket by bucket. A read of bodies goes
    page by page (one page in flight at a time), each page sized by a :class:`PageSizer`."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
    )
    if not has_bodies(columns):
        for bucket, blo, bhi in split_by_bucket(lo, hi, queue.bucket_size):
            yield from conn.execute(stmt, (queue.queue_id, bucket, blo, bhi))
        return
    pages = PageSizer(queue)
    for bucket, blo, bhi in split_by_bucket(lo, hi, queue.bucket_size):
        state = None
        while True:
            bound = stmt.bind((queue.queue_id, bucket, blo, bhi))
            bound.fetch_size = pages.rows
            result = conn.execute(bound, paging_state=state)
            rows = result.current_rows
            pages.saw(rows)
            yield from rows
            state = result.paging_state
            if state is None:
                break


def column_names(columns: str) -> list[str]:
    """The selected columns of ``columns`` (a SELECT's column list without nested commas)."""
    return [c.strip() for c in columns.split(",")]


def read_pages(
    conn: Connection, queue: QueueInfo, lo: int, hi: int, columns: str
) -> Iterator[list[tuple]]:
    """The rows of :func:`read_range`, page by page as the driver hands them: a list of plain
    tuples (``Connection.tuple_profile``), one value per selected column in the order of
    ``columns``, each page's rows in id order. A caller turns a page into columns at once
    (``engine/stream/columns.py``), with no Python step per row. The next page is requested
    before a page is handed out, so that the caller's work on it overlaps the wait for the
    next; pages of bodies are sized by a :class:`PageSizer` from the pages seen before, as
    :func:`read_range` sizes them."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
    )
    names = column_names(columns)
    at_payload = names.index("payload") if "payload" in names else None
    at_headers = names.index("headers") if "headers" in names else None
    pages = PageSizer(queue) if at_payload is not None else None
    parts = iter(split_by_bucket(lo, hi, queue.bucket_size))

    def send(part: tuple[int, int, int], state: bytes | None):
        bucket, blo, bhi = part
        bound = stmt.bind((queue.queue_id, bucket, blo, bhi))
        bound.fetch_size = pages.rows if pages is not None else DEFAULT_PAGE_ROWS
        return conn.execute_async(bound, paging_state=state, execution_profile=conn.tuple_profile)

    part = next(parts, None)
    pending = send(part, None) if part is not None else None
    while pending is not None:
        result = pending.result()
        rows = result.current_rows
        if rows and pages is not None and at_payload is not None:
            pages.saw_tuples(rows, at_payload, at_headers)
        state = result.paging_state
        if state is None:
            part = next(parts, None)
        pending = send(part, state) if part is not None else None
        if rows:
            yield rows


def read_one(conn: Connection, queue: QueueInfo, message_id: int, columns: str = COLUMNS):
    return conn.execute(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
        (queue.queue_id, bucket_of(message_id, queue.bucket_size), message_id),
    ).one()
