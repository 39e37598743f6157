"""What the cassieq sink takes from Spark: the input schema, checked on the driver, and the rows
of a task, checked and converted slice by slice (Arrow record batches or rows) into the
:class:`~cassieq_spark.engine.write.keyed_write.Slice` values a keyed or routed write pulls.

The row checks need only an :class:`InputCheck`: where the columns are (:class:`InputLayout`),
the queue of option 'queue' and a way to resolve the queues a ``queue`` column names; they
never touch the write. A slice is checked whole before it is yielded, so a bad row fails the
task with nothing of its slice handed on. Every refusal names the column and the row (its
0-based position in the task's partition), so a user finds the bad row; a task that fails
here rolls back what it wrote (see ``sink.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from .. import validate
from ..config import validate_queue_name
from ..engine.core.messages import HEADER_GROUP
from ..engine.core.queues import QueueInfo
from ..engine.write.keyed_write import Slice
from ..errors import ConfigError, PayloadTooLargeError, QueueNotFoundError
from ..validate import MAX_DELAY_SECONDS
from .schema import (
    SINK_COLUMNS,
    SINK_DEDUP,
    SINK_DELAY,
    SINK_GROUP,
    SINK_HEADERS,
    SINK_QUEUE,
    SINK_VALUE,
)

ROWS_PER_SLICE = 2048  # the row writer hands rows on in slices of this many

_DELAY_TYPES = (DoubleType, FloatType, IntegerType, LongType)


# -- schema check (driver) --------------------------------------------------------------------


@dataclass(frozen=True)
class InputLayout:
    """Where the accepted columns are in the input rows."""

    value: int
    value_is_string: bool
    headers: int | None
    delay: int | None
    queue: int | None = None  # the row's destination; None: every row goes to option 'queue'
    group: int | None = None  # the row's message group
    dedup: int | None = None  # the row's deduplication id (column `dedupId`)


# The optional string columns: the name users write, and what the column holds.
STRING_COLUMNS = {
    SINK_QUEUE: ("queue", "the name of the row's queue"),
    SINK_GROUP: ("group", "the row's message group"),
    SINK_DEDUP: ("dedupId", "the row's deduplication id"),
}


def _type_name(t: DataType) -> str:
    return t.simpleString()


def check_input_schema(schema: StructType) -> InputLayout:
    """Fail before anything is written if the input has columns the sink cannot take."""
    allowed = (
        "value (string or binary, required), headers (map<string,string>), delay (double), "
        "queue (string: the row's queue), group (string: the row's message group), "
        "dedupId (string: the row's deduplication id)"
    )
    names = [f.name.lower() for f in schema.fields]
    if SINK_VALUE not in names:
        raise ConfigError(
            f"the cassieq sink needs a column 'value' (string or binary) with the payload; "
            f"the input has {', '.join(schema.fieldNames()) or 'no columns'}; allowed columns: "
            f"{allowed}"
        )
    found: dict[str, int] = {}
    for i, f in enumerate(schema.fields):
        name = names[i]
        if name not in SINK_COLUMNS:
            raise ConfigError(
                f"column {f.name!r} ({_type_name(f.dataType)}) is not accepted by the cassieq "
                f"sink; allowed columns: {allowed}. Select or drop columns before writing"
            )
        if name in found:
            raise ConfigError(f"column {f.name!r} appears twice in the input")
        found[name] = i
    value_type = schema.fields[found[SINK_VALUE]].dataType
    if not isinstance(value_type, (StringType, BinaryType)):
        raise ConfigError(
            f"column 'value' must be string or binary, got {_type_name(value_type)}; "
            "cast it, e.g. col('value').cast('string')"
        )
    if SINK_HEADERS in found:
        t = schema.fields[found[SINK_HEADERS]].dataType
        if not (
            isinstance(t, MapType)
            and isinstance(t.keyType, StringType)
            and isinstance(t.valueType, StringType)
        ):
            raise ConfigError(f"column 'headers' must be map<string,string>, got {_type_name(t)}")
    if SINK_DELAY in found:
        t = schema.fields[found[SINK_DELAY]].dataType
        if not isinstance(t, _DELAY_TYPES):
            raise ConfigError(
                f"column 'delay' must be double (seconds of initial invisibility), got "
                f"{_type_name(t)}"
            )
    for column, (name, meaning) in STRING_COLUMNS.items():
        if column in found:
            t = schema.fields[found[column]].dataType
            if not isinstance(t, StringType):
                raise ConfigError(
                    f"column {name!r} must be string ({meaning}), got {_type_name(t)}"
                )
    return InputLayout(
        found[SINK_VALUE],
        isinstance(value_type, StringType),
        found.get(SINK_HEADERS),
        found.get(SINK_DELAY),
        found.get(SINK_QUEUE),
        found.get(SINK_GROUP),
        found.get(SINK_DEDUP),
    )


# -- a task's rows (executors) ----------------------------------------------------------------


@dataclass(frozen=True)
class InputCheck:
    """What checking one task's rows needs: the columns' places, the queue of option 'queue'
    (``default_queue``; None: every row's ``queue`` column must name one) and ``resolve``, a
    queue name to its :class:`QueueInfo` (looked up, or created with createQueue=true; raises
    ``QueueNotFoundError``), used only when the input has a ``queue`` column. ``partition``
    names the task's partition in errors."""

    layout: InputLayout
    default_queue: QueueInfo | None
    resolve: Callable[[str], QueueInfo] | None = None
    partition: int = 0

    def where(self, position: int) -> str:
        return f"row {position} (0-based) of partition {self.partition}"


def _headers(h: dict | None, check: InputCheck, position: int) -> dict | None:
    """A row's headers within the limits of the client's (count, bytes), the row named."""
    if not h:
        return None
    h = dict(h)
    try:
        return validate.headers(h)
    except ConfigError as exc:
        raise type(exc)(f"column 'headers' at {check.where(position)}: {exc}") from None


def _grouped(
    check: InputCheck,
    base: int,
    groups: list | None,
    headers: list[dict | None] | None,
    delays: list[float] | None,
) -> list[dict | None] | None:
    """The rows' headers with each row's group (column ``group``) as the reserved header, both
    ways of giving a group checked as the client checks them (a grouped row cannot be
    delayed)."""
    if groups is None and not (headers and any(h and HEADER_GROUP in h for h in headers)):
        return headers
    n = len(groups) if groups is not None else len(headers or [])
    out: list[dict | None] = list(headers) if headers is not None else [None] * n
    for i in range(n):
        g = groups[i] if groups is not None else None
        if g is None and not (out[i] and HEADER_GROUP in out[i]):  # type: ignore[operator]
            continue
        try:
            out[i] = validate.grouped_headers(out[i], g, delays[i] if delays else 0.0)
        except ConfigError as exc:
            raise type(exc)(f"column 'group' at {check.where(base + i)}: {exc}") from None
    return out


def _dedup_ids(values: list, check: InputCheck, base: int) -> list[str | None] | None:
    """A slice's deduplication ids, each checked (null: the row has none); None when no row
    has one."""
    if all(v is None for v in values):
        return None
    return [
        None if v is None else validate.dedup_id(v, f"column 'dedupId' at {check.where(base + i)}")
        for i, v in enumerate(values)
    ]


def _first_true(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


class _Router:
    """Each row's queue for one task: option 'queue' where the column is null, names checked
    once (a queue already resolved is not checked again) and resolved once."""

    def __init__(self, check: InputCheck):
        if check.resolve is None:
            raise ValueError("an input with a 'queue' column needs InputCheck.resolve")
        self.check = check
        self.resolve = check.resolve
        q = check.default_queue
        self.infos: dict[str, QueueInfo] = {q.name: q} if q is not None else {}

    def route(self, names: list[str | None], base: int) -> tuple[list[str], list[int]]:
        """Each row's queue and its payload limit. Every distinct queue of the rows is checked
        and resolved before they are handed on, so an unknown one fails with nothing of the
        slice added."""
        check = self.check
        default = check.default_queue
        first: dict[str, int] = {}
        dests: list[str] = []
        for i, n in enumerate(names):
            if n is None:
                if default is None:
                    raise ConfigError(
                        f"column 'queue' is null at {check.where(base + i)} and option 'queue' "
                        "(the queue of such rows) is not set; set it or fill the column"
                    )
                n = default.name
            if n not in first:
                first[n] = i
                if n not in self.infos:
                    validate_queue_name(
                        n, f"queue name (column 'queue' at {check.where(base + i)})"
                    )
            dests.append(n)
        for n, i in first.items():
            if n in self.infos:
                continue
            try:
                self.infos[n] = self.resolve(n)
            except QueueNotFoundError as exc:
                raise QueueNotFoundError(
                    f"column 'queue' at {check.where(base + i)}: {exc}"
                ) from None
        return dests, [self.infos[d].max_payload_bytes for d in dests]


def _limit_error(
    check: InputCheck, where: int, size: int, queue: str, limit: int
) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"column 'value' at {check.where(where)} has {size} bytes; queue {queue!r} "
        f"allows at most {limit} (maxPayloadBytes)"
    )


def _default(check: InputCheck) -> QueueInfo:
    """Option 'queue', the queue of every row of an input without a ``queue`` column."""
    if check.default_queue is None:
        raise ValueError("an input without a 'queue' column needs InputCheck.default_queue")
    return check.default_queue


def arrow_slices(check: InputCheck, batches: Iterable[pa.RecordBatch]) -> Iterator[Slice]:
    """One checked :class:`Slice` per non-empty Arrow record batch of ``batches``."""
    layout = check.layout
    router = _Router(check) if layout.queue is not None else None
    queue = None if router is not None else _default(check)
    base = 0  # rows handed on so far
    for rb in batches:
        if rb.num_rows == 0:
            continue
        dests: list[str] | None = None
        if router is not None:
            assert layout.queue is not None
            dests, limits = router.route(rb.column(layout.queue).to_pylist(), base)
        else:
            assert queue is not None
            limits = [queue.max_payload_bytes] * rb.num_rows
        value = rb.column(layout.value)
        if value.null_count:
            i = _first_true(pc.is_null(value))
            raise ConfigError(
                f"column 'value' is null at {check.where(base + i)}; every message "
                "needs a payload (filter or fill nulls before writing)"
            )
        if layout.value_is_string:
            value = value.cast(
                pa.large_binary() if pa.types.is_large_string(value.type) else pa.binary()
            )
        lengths = pc.binary_length(value)
        over = pc.greater(lengths, pa.array(limits, pa.int64()))
        if pc.any(over).as_py():
            i = _first_true(over)
            name = dests[i] if dests is not None else _default(check).name
            raise _limit_error(check, base + i, lengths[i].as_py(), name, limits[i])
        headers = None
        if layout.headers is not None:
            col = rb.column(layout.headers)
            if col.null_count < len(col):
                if col.items.null_count:
                    for i, h in enumerate(col.to_pylist()):
                        if h and any(v is None for _, v in h):
                            raise ConfigError(
                                f"column 'headers' has a null value at "
                                f"{check.where(base + i)}; header values must be strings"
                            )
                headers = [_headers(h, check, base + i) for i, h in enumerate(col.to_pylist())]
        delays = None
        if layout.delay is not None:
            # Unsafe: a bigint beyond 2**53 becomes the nearest double instead of a raw
            # ArrowInvalid, and is then refused below with its row.
            d = pc.fill_null(pc.cast(rb.column(layout.delay), pa.float64(), safe=False), 0.0)
            bad = pc.or_(
                pc.or_(pc.less(d, 0.0), pc.invert(pc.is_finite(d))),
                pc.greater(d, MAX_DELAY_SECONDS),
            )
            if pc.any(bad).as_py():
                i = _first_true(bad)
                raise ConfigError(
                    f"column 'delay' is {d[i].as_py()} at {check.where(base + i)}; "
                    f"it must be a finite number of seconds from 0 to {MAX_DELAY_SECONDS:g}"
                )
            if pc.max(d).as_py() > 0:
                delays = d.to_pylist()
        groups = rb.column(layout.group).to_pylist() if layout.group is not None else None
        headers = _grouped(check, base, groups, headers, delays)
        dedup = None
        if layout.dedup is not None:
            dedup = _dedup_ids(rb.column(layout.dedup).to_pylist(), check, base)
        yield Slice(value.to_pylist(), headers, delays, lengths.to_pylist(), dests, dedup)
        base += rb.num_rows


def row_slices(check: InputCheck, rows: Iterable) -> Iterator[Slice]:
    """Checked :class:`Slice` values of ``ROWS_PER_SLICE`` Spark rows each (the last one
    shorter)."""
    layout = check.layout
    vi, hi_, di, qi, gi = layout.value, layout.headers, layout.delay, layout.queue, layout.group
    router = _Router(check) if qi is not None else None
    queue = None if router is not None else _default(check)
    dests: list[str] | None = [] if router is not None else None
    payloads: list[bytes] = []
    headers: list[dict | None] | None = [] if hi_ is not None else None
    delays: list[float] | None = [] if di is not None else None
    sizes: list[int] = []
    groups: list | None = [] if gi is not None else None
    any_delay = False
    first = 0  # the position of the slice's first row
    ui = layout.dedup
    dedup: list = []

    def done() -> Slice:
        d = delays if any_delay else None
        ids = _dedup_ids(dedup, check, first) if ui is not None else None
        return Slice(payloads, _grouped(check, first, groups, headers, d), d, sizes, dests, ids)

    for pos, row in enumerate(rows):
        v = row[vi]
        if v is None:
            raise ConfigError(
                f"column 'value' is null at {check.where(pos)}; every message "
                "needs a payload (filter or fill nulls before writing)"
            )
        data = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if router is not None and dests is not None:
            (dest,), (limit,) = router.route([row[qi]], pos)
            dests.append(dest)
        else:
            assert queue is not None
            dest, limit = queue.name, queue.max_payload_bytes
        if len(data) > limit:
            raise _limit_error(check, pos, len(data), dest, limit)
        payloads.append(data)
        sizes.append(len(data))
        if headers is not None:
            h = row[hi_]
            if h and any(x is None for x in h.values()):
                raise ConfigError(
                    f"column 'headers' has a null value at {check.where(pos)}; "
                    "header values must be strings"
                )
            headers.append(_headers(h, check, pos))
        if delays is not None:
            d = row[di]
            d = 0.0 if d is None else float(d)
            if not (0 <= d <= MAX_DELAY_SECONDS):
                raise ConfigError(
                    f"column 'delay' is {d} at {check.where(pos)}; it must be a "
                    f"finite number of seconds from 0 to {MAX_DELAY_SECONDS:g}"
                )
            any_delay = any_delay or d > 0
            delays.append(d)
        if groups is not None:
            groups.append(row[gi])
        if ui is not None:
            dedup.append(row[ui])
        if len(payloads) >= ROWS_PER_SLICE:
            yield done()
            dedup = []
            payloads, sizes = [], []
            dests = [] if router is not None else None
            headers = [] if hi_ is not None else None
            delays = [] if di is not None else None
            groups = [] if gi is not None else None
            any_delay = False
            first = pos + 1
    if payloads:
        yield done()
