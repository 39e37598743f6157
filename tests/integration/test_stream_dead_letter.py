"""A streaming query counts deliveries across its runs and dead-letters a poison batch (issue 16,
item 6, second half). A batch that fails is replayed by the next run with the same positions;
after ``maxBatchAttempts`` runs (by default the queue's ``max_delivery_count``, at least 2) its
messages go to the dead-letter queue, once, and the query goes on. Real Cassandra, real Spark,
real restarts from one checkpoint."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from support.stream import start

from cassieq_spark.engine.upkeep.deadletter import (
    HEADER_DELIVERY_COUNT,
    HEADER_ORIGIN_ID,
    HEADER_ORIGIN_QUEUE,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 180


class Runs:
    """Runs one AvailableNow query again and again on one checkpoint, as a scheduler restarting
    a failed job would; records (run, batch, id, delivery_count) of every row delivered."""

    def __init__(self, spark, options: dict, checkpoint, fail_when):
        self.spark, self.options, self.checkpoint = spark, options, checkpoint
        self.fail_when = fail_when  # (run, batch_id, rows) -> an error message or None
        self.run = 0
        self.seen: list[tuple[int, int, int, int]] = []

    def _process(self, df, batch_id: int) -> None:
        rows = df.collect()
        self.seen.extend((self.run, batch_id, r.id, r.delivery_count) for r in rows)
        why = self.fail_when(self.run, batch_id, rows)
        if why:
            raise RuntimeError(why)

    def once(self) -> Exception | None:
        """One run to its end; the error that ended it, or None."""
        self.run += 1
        q = start(
            self.spark,
            self.options,
            self._process,
            self.checkpoint,
            {"availableNow": True},
            maxMessagesPerTrigger=10,
        )
        try:
            assert q.awaitTermination(TIMEOUT), "the run did not end"
        except Exception as exc:  # StreamingQueryException: the batch failed
            return exc
        return q.exception()

    def counts(self) -> dict[int, list[int]]:
        """id -> the delivery counts it was delivered with, in order."""
        out: dict[int, list[int]] = defaultdict(list)
        for _run, _batch, mid, count in self.seen:
            out[mid].append(count)
        return dict(out)


def _poisoned(queue_client, queue: str, dlq: str | None) -> tuple[list[int], int]:
    """30 messages in buckets of 10; the 16th is the poison one."""
    if dlq:
        queue_client.create_queue(dlq)
    queue_client.create_queue(queue, bucket_size=10, max_delivery_count=2, dead_letter_queue=dlq)
    ids = queue_client.put_many(queue, [f"m{i}".encode() for i in range(30)][:15])
    ids += queue_client.put_many(queue, [b"poison"])
    ids += queue_client.put_many(queue, [f"m{i}".encode() for i in range(16, 30)])
    return ids, ids[15]


def _poison_in(rows) -> bool:
    return any(bytes(r.value) == b"poison" for r in rows)


def test_a_poison_batch_goes_to_the_dead_letter_queue_after_max_delivery_count_runs(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    dlq = queue_name + "_dlq"
    ids, poison = _poisoned(queue_client, queue_name, dlq)
    moved_at: list[int] = []

    def fail_when(run, batch_id, rows):
        if _poison_in(rows):
            return f"poison in batch {batch_id} (run {run})"
        if batch_id == 1 and not moved_at:
            moved_at.append(run)  # the run that moved the batch away crashes once after it
            return "crash after the move"
        return None

    runs = Runs(sspark, {**cassieq_options, "queue": queue_name}, tmp_path / "ck", fail_when)
    errors = [runs.once() for _ in range(4)]
    assert "poison in batch 1 (run 1)" in str(errors[0])
    assert "poison in batch 1 (run 2)" in str(errors[1])
    assert "crash after the move" in str(errors[2]) and moved_at == [3]
    assert errors[3] is None, errors[3]

    counts = runs.counts()
    first, poisoned, last = ids[:10], ids[10:20], ids[20:]
    assert {m: counts.get(m) for m in first + last} == {m: [1] for m in first + last}
    # delivered by runs 1 and 2, then moved: never a third time. A replay brings the same
    # rows as the first run (count 1 both times); the copies carry the real count.
    assert {m: counts.get(m) for m in poisoned} == {m: [1, 1] for m in poisoned}

    # once each, although run 3 crashed after moving them and run 4 read the batch again
    h = F.col("headers")
    schema = "origin long, origin_queue string, deliveries string, value string"
    assert_df_equality(
        sspark.read.format("cassieq")
        .options(**cassieq_options)
        .option("queue", dlq)
        .load()
        .select(
            h[HEADER_ORIGIN_ID].cast("long").alias("origin"),
            h[HEADER_ORIGIN_QUEUE].alias("origin_queue"),
            h[HEADER_DELIVERY_COUNT].alias("deliveries"),
            F.col("value").cast("string").alias("value"),
        ),
        sspark.createDataFrame(
            [
                (m, queue_name, "2", "poison" if m == poison else f"m{i + 10}")
                for i, m in enumerate(poisoned)
            ],
            schema,
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    st = queue_client.stats(queue_name)
    assert st["dead_lettered"] == 10 and st["backlog"] == 0, st

    before = len(runs.seen)
    assert runs.once() is None
    assert len(runs.seen) == before, "a fifth run delivered something again"


def test_count_deliveries_false_neither_counts_nor_moves(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    dlq = queue_name + "_dlq"
    ids, poison = _poisoned(queue_client, queue_name, dlq)
    runs = Runs(
        sspark,
        {**cassieq_options, "queue": queue_name, "countDeliveries": "false"},
        tmp_path / "ck",
        lambda run, batch_id, rows: "poison" if _poison_in(rows) else None,
    )
    errors = [runs.once() for _ in range(3)]
    assert all(e is not None and "poison" in str(e) for e in errors), errors
    counts = runs.counts()
    assert counts[poison] == [1, 1, 1]
    assert queue_client.get(dlq) is None
    assert queue_client.stats(queue_name)["dead_lettered"] == 0


def test_client_deliveries_show_in_the_count_but_never_shorten_the_replays(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    """A message a client received once and let expire comes to the stream through its timer
    with delivery count 2 (max_delivery_count 2). A replay must bring the first attempt's rows,
    so the client's delivery does not take it out of run 2's replay: it is moved once the
    batch failed maxBatchAttempts (here the queue's 2) runs, by run 3; its copy counts the
    client's delivery and the two runs."""
    dlq = queue_name + "_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(
        queue_name, bucket_size=10, max_delivery_count=2, dead_letter_queue=dlq
    )
    mid = queue_client.put(queue_name, b"poison")
    got = queue_client.get(queue_name, visibility_timeout=0.5)
    assert got is not None and got.id == mid and got.delivery_count == 1
    time.sleep(1.5)  # the client's delivery expires: the message is due again through its timer
    runs = Runs(
        sspark,
        {**cassieq_options, "queue": queue_name},
        tmp_path / "ck",
        lambda run, batch_id, rows: "poison" if _poison_in(rows) else None,
    )
    for _ in range(2):
        err = runs.once()
        assert err is not None and "poison" in str(err), err
    assert runs.counts() == {mid: [2, 2]}  # the client's delivery, then the stream's; replayed
    assert runs.once() is None
    assert runs.counts() == {mid: [2, 2]}  # moved by the third run, not delivered
    letter = queue_client.get(dlq)
    assert letter is not None and letter.payload == b"poison"
    assert letter.headers[HEADER_ORIGIN_ID] == str(mid)
    assert letter.headers[HEADER_DELIVERY_COUNT] == "3"
