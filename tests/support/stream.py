"""Streaming queries of the cassieq source in a test: a foreachBatch collector, a query started
with options, and a poll that fails as soon as the query does."""

from __future__ import annotations

import threading
import time
from collections import defaultdict


class Collector:
    """A foreachBatch sink (runs in this process): ids per batch id."""

    def __init__(self, fail_on_batch: int | None = None):
        self.batches: dict[int, list[int]] = defaultdict(list)
        self.rows: list = []
        self.fail_on_batch = fail_on_batch
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = df.collect()
        if self.fail_on_batch is not None and batch_id == self.fail_on_batch and rows:
            raise RuntimeError(f"sink fails on purpose in batch {batch_id}")
        with self.lock:
            self.batches[batch_id].extend(r.id for r in rows)
            self.rows.extend(rows)

    @property
    def ids(self) -> list[int]:
        with self.lock:
            return sorted(i for ids in self.batches.values() for i in ids)


def start(spark, options, collector, checkpoint, trigger, **extra):
    reader = spark.readStream.format("cassieq")
    for k, v in {**options, **extra}.items():
        reader = reader.option(k, str(v))
    return (
        reader.load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def wait_for(predicate, timeout: float, what: str, query=None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
