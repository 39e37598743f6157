"""The ``cassieq`` data source with each Python phase timed and cProfiled, for the profiles.

Registered as ``cassieq_profiled``; it behaves exactly as ``cassieq`` (same classes, same
options), but every call Spark makes into our Python code -- on the driver's streaming source
runner (``latestOffset``, ``partitions``, ``commit``) and in the Python workers (``read`` of a
partition, ``write`` of a sink task) -- runs under ``cProfile`` and leaves, in the directory
named by the environment variable ``CASSIEQ_PROF_DIR`` (inherited by Spark's Python
processes in local mode):

- ``phases.jsonl``: one line per call: phase, pid, start (epoch s), seconds, rows, and the CPU
  seconds it took (``cpu_thread``: the calling thread, where all our Python runs;
  ``cpu_process``: the whole process, the driver's I/O thread included). On a machine shared
  with other work the wall-clock split stretches with the load, the CPU seconds much less;
- ``<phase>-<pid>-<n>.prof``: its cProfile stats (``pstats`` format).

A partition's ``read`` is drained inside the profile (its Arrow batches are kept in memory and
handed to Spark afterwards), so the profile covers the whole read and nothing of Spark's.
"""

from __future__ import annotations

import cProfile
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from cassieq_spark.spark.provider import CassieQDataSource
from cassieq_spark.spark.sink import (
    CassieQStreamArrowWriter,
    CassieQStreamWriter,
    stream_writer,
)
from cassieq_spark.spark.source import CassieQStreamReader

ENV = "CASSIEQ_PROF_DIR"
_seq = itertools.count()
T = TypeVar("T")


def _record(phase: str, fn: Callable[[], T], rows: Callable[[T], int] | None = None) -> T:
    """Run ``fn`` under cProfile; dump its stats and a timing line when ``CASSIEQ_PROF_DIR``
    is set (otherwise just run it)."""
    out_dir = os.environ.get(ENV)
    if not out_dir:
        return fn()
    prof = cProfile.Profile()
    start = time.time()
    t0 = time.perf_counter()
    c0, p0 = time.thread_time(), time.process_time()
    prof.enable()
    try:
        result = fn()
    finally:
        prof.disable()
    seconds = time.perf_counter() - t0
    cpu_thread, cpu_process = time.thread_time() - c0, time.process_time() - p0
    pid = os.getpid()
    prof.dump_stats(os.path.join(out_dir, f"{phase}-{pid}-{next(_seq)}.prof"))
    line = {
        "phase": phase,
        "pid": pid,
        "start": start,
        "seconds": seconds,
        "cpu_thread": cpu_thread,
        "cpu_process": cpu_process,
        "rows": rows(result) if rows is not None else None,
    }
    with open(os.path.join(out_dir, "phases.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return result


class ProfiledStreamReader(CassieQStreamReader):
    """``CassieQStreamReader`` with its start, planning, reading and acking recorded."""

    def initialOffset(self) -> dict:
        call = super().initialOffset
        return _record("initialOffset", call)

    def prepareForTriggerAvailableNow(self) -> None:
        call = super().prepareForTriggerAvailableNow
        _record("prepareForTriggerAvailableNow", call)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        call = super().latestOffset
        return _record("latestOffset", lambda: call(start, limit))

    def partitions(self, start: dict, end: dict) -> Any:
        call = super().partitions
        return _record("partitions", lambda: call(start, end), rows=len)

    def read(self, partition: Any) -> Iterator[Any]:
        call = super().read
        batches = _record(
            "read",
            lambda: list(call(partition)),
            rows=lambda bs: sum(b.num_rows for b in bs),
        )
        return iter(batches)

    def commit(self, end: dict) -> None:
        call = super().commit
        _record("commit", lambda: call(end))


class ProfiledArrowWriter(CassieQStreamArrowWriter):
    """The sink's Arrow stream writer with each task's ``write`` recorded."""

    def write(self, iterator: Any) -> Any:
        call = super().write
        return _record("write", lambda: call(iterator))


class ProfiledRowWriter(CassieQStreamWriter):
    """The sink's row stream writer with each task's ``write`` recorded."""

    def write(self, iterator: Any) -> Any:
        call = super().write
        return _record("write", lambda: call(iterator))


_PROFILED_WRITERS: dict[type, type] = {
    CassieQStreamArrowWriter: ProfiledArrowWriter,
    CassieQStreamWriter: ProfiledRowWriter,
}


class ProfiledCassieQ(CassieQDataSource):
    """``format("cassieq_profiled")``: ``cassieq`` with its Python phases recorded."""

    @classmethod
    def name(cls) -> str:
        return "cassieq_profiled"

    def streamReader(self, schema: Any) -> ProfiledStreamReader:
        return ProfiledStreamReader(self.options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        w = stream_writer(self.options, schema, overwrite)
        w.__class__ = _PROFILED_WRITERS[type(w)]
        return w


def register(spark: Any) -> None:
    spark.dataSource.register(ProfiledCassieQ)
