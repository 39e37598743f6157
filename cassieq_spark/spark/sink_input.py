"""What the cassieq sink takes from Spark: the input schema, checked on the driver, and the rows
of a task, checked and converted slice by slice (Arrow record batches or rows) into what
``engine/keyed_write.py`` writes.

Every refusal names the column and the row (its 0-based position in the task's partition), so
a user finds the bad row; a task that fails here rolls back what it wrote (see ``sink.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from ..errors import ConfigError, PayloadTooLargeError
from ..validate import MAX_DELAY_SECONDS
from .schema import SINK_COLUMNS, SINK_DELAY, SINK_HEADERS, SINK_VALUE

if TYPE_CHECKING:
    from .sink import _TaskWrite

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


def _type_name(t: DataType) -> str:
    return t.simpleString()


def check_input_schema(schema: StructType) -> InputLayout:
    """Fail before anything is written if the input has columns the sink cannot take."""
    allowed = "value (string or binary, required), headers (map<string,string>), delay (double)"
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
    return InputLayout(
        found[SINK_VALUE],
        isinstance(value_type, StringType),
        found.get(SINK_HEADERS),
        found.get(SINK_DELAY),
    )


# -- a task's rows (executors) ----------------------------------------------------------------


def _where(partition: int, position: int) -> str:
    return f"row {position} (0-based) of partition {partition}"


def _headers(h: dict | None, partition: int, position: int) -> dict | None:
    """A row's headers within the limits of the client's (count, bytes), the row named."""
    if not h:
        return None
    h = dict(h)
    try:
        return validate.headers(h)
    except ConfigError as exc:
        raise type(exc)(f"column 'headers' at {_where(partition, position)}: {exc}") from None


def _first_true(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def arrow_slices(task: _TaskWrite, batches: Iterator[pa.RecordBatch]) -> Iterator[None]:
    """Feed ``task`` from Arrow record batches, one ``None`` per batch fed."""
    layout = task.plan.layout
    limit = task.queue.max_payload_bytes
    for rb in batches:
        if rb.num_rows == 0:
            continue
        base = task.position
        value = rb.column(layout.value)
        if value.null_count:
            i = _first_true(pc.is_null(value))
            raise ConfigError(
                f"column 'value' is null at {_where(task.partition, base + i)}; every message "
                "needs a payload (filter or fill nulls before writing)"
            )
        if layout.value_is_string:
            value = value.cast(
                pa.large_binary() if pa.types.is_large_string(value.type) else pa.binary()
            )
        lengths = pc.binary_length(value)
        longest = pc.max(lengths).as_py()
        if longest > limit:
            i = _first_true(pc.greater(lengths, limit))
            raise PayloadTooLargeError(
                f"column 'value' at {_where(task.partition, base + i)} has {lengths[i].as_py()} "
                f"bytes; queue {task.queue.name!r} allows at most {limit} (maxPayloadBytes)"
            )
        headers = None
        if layout.headers is not None:
            col = rb.column(layout.headers)
            if col.null_count < len(col):
                if col.items.null_count:
                    for i, h in enumerate(col.to_pylist()):
                        if h and any(v is None for _, v in h):
                            raise ConfigError(
                                f"column 'headers' has a null value at "
                                f"{_where(task.partition, base + i)}; header values must be strings"
                            )
                headers = [
                    _headers(h, task.partition, base + i) for i, h in enumerate(col.to_pylist())
                ]
        delays = None
        if layout.delay is not None:
            d = pc.fill_null(rb.column(layout.delay).cast(pa.float64()), 0.0)
            bad = pc.or_(
                pc.or_(pc.less(d, 0.0), pc.invert(pc.is_finite(d))),
                pc.greater(d, MAX_DELAY_SECONDS),
            )
            if pc.any(bad).as_py():
                i = _first_true(bad)
                raise ConfigError(
                    f"column 'delay' is {d[i].as_py()} at {_where(task.partition, base + i)}; "
                    f"it must be a finite number of seconds from 0 to {MAX_DELAY_SECONDS:g}"
                )
            if pc.max(d).as_py() > 0:
                delays = d.to_pylist()
        task.add(value.to_pylist(), headers, delays, lengths.to_pylist())
        yield None


def row_slices(task: _TaskWrite, rows: Iterator) -> Iterator[None]:
    """Feed ``task`` from Spark rows, ``ROWS_PER_SLICE`` at a time."""
    layout = task.plan.layout
    limit = task.queue.max_payload_bytes
    vi, hi_, di = layout.value, layout.headers, layout.delay
    payloads: list[bytes] = []
    headers: list | None = [] if hi_ is not None else None
    delays: list | None = [] if di is not None else None
    sizes: list[int] = []
    any_delay = False
    for pos, row in enumerate(rows):
        v = row[vi]
        if v is None:
            raise ConfigError(
                f"column 'value' is null at {_where(task.partition, pos)}; every message "
                "needs a payload (filter or fill nulls before writing)"
            )
        data = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if len(data) > limit:
            raise PayloadTooLargeError(
                f"column 'value' at {_where(task.partition, pos)} has {len(data)} bytes; "
                f"queue {task.queue.name!r} allows at most {limit} (maxPayloadBytes)"
            )
        payloads.append(data)
        sizes.append(len(data))
        if headers is not None:
            h = row[hi_]
            if h and any(x is None for x in h.values()):
                raise ConfigError(
                    f"column 'headers' has a null value at {_where(task.partition, pos)}; "
                    "header values must be strings"
                )
            headers.append(_headers(h, task.partition, pos))
        if delays is not None:
            d = row[di]
            d = 0.0 if d is None else float(d)
            if not (0 <= d <= MAX_DELAY_SECONDS):
                raise ConfigError(
                    f"column 'delay' is {d} at {_where(task.partition, pos)}; it must be a "
                    f"finite number of seconds from 0 to {MAX_DELAY_SECONDS:g}"
                )
            any_delay = any_delay or d > 0
            delays.append(d)
        if len(payloads) >= ROWS_PER_SLICE:
            task.add(payloads, headers, delays if any_delay else None, sizes)
            yield None
            payloads, sizes = [], []
            headers = [] if hi_ is not None else None
            delays = [] if di is not None else None
            any_delay = False
    if payloads:
        task.add(payloads, headers, delays if any_delay else None, sizes)
        yield None
