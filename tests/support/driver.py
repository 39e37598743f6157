"""Spark's driver side of a streaming query, run in the test's own process: the test calls
``initialOffset``, ``latestOffset``, ``partitions``, ``read`` and ``commit`` as Spark would, and
may act between two of them (the ``drivers`` fixture of ``support.fixtures`` makes them)."""

from __future__ import annotations

from collections import Counter

from pyspark.sql.streaming.datasource import ReadAllAvailable

from cassieq_spark.spark.source import CassieQStreamReader


class Driver:
    """Spark's driver side of one query run, in this process."""

    def __init__(self, options: dict, **extra):
        self.reader = CassieQStreamReader({**options, **{k: str(v) for k, v in extra.items()}})
        self.offset: dict | None = None
        self.delivered: Counter = Counter()

    def start(self, offset: dict | None = None) -> dict:
        self.offset = offset if offset is not None else self.reader.initialOffset()
        return self.offset

    def plan(self, limit=None) -> dict | None:
        """latestOffset for the next batch (it acks the previous one); None: no new batch."""
        end = self.reader.latestOffset(self.offset, limit or ReadAllAvailable())
        return None if end == self.offset else end

    def read(self, start: dict, end: dict) -> list[int]:
        ids = []
        for part in self.reader.partitions(start, end):
            for batch in self.reader.read(part):
                ids.extend(batch.column("id").to_pylist())
        self.delivered.update(ids)
        return ids

    def rows(self, start: dict, end: dict) -> list[dict]:
        """Every column of the rows the batch ``(start, end]`` delivers, one dict per row."""
        out = []
        for part in self.reader.partitions(start, end):
            for batch in self.reader.read(part):
                out.extend(batch.to_pylist())
        self.delivered.update(r["id"] for r in out)
        return out

    def batch(self, limit=None) -> list[int]:
        """Plan, read and move on (acked by the next plan or by commit())."""
        end = self.plan(limit)
        if end is None:
            return []
        ids = self.read(self.offset, end)
        self.offset = end
        return ids

    def commit(self) -> None:
        self.reader.commit(self.offset)

    def drain(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            if not self.batch():
                break
        self.commit()
