"""A replayed stream batch brings the rows of its first attempt, and a poison batch is moved
or reported, never dropped unseen.

Spark replays the batch it logged last and did not commit with the same offsets, and writes
keyed on the batch (the cassieq sink, ``df.write`` with ``writeId``, Delta's ``txnVersion``)
rely on the replay being the same rows. The stream's delivery counting must therefore not take
rows out of a replay because of a client's earlier deliveries, nor on the first replay at all
(spark-semantics review 2, S2); and a batch that failed ``maxBatchAttempts`` runs leaves the
queue only for its dead-letter queue: with none, the query fails and says so (protocol review 2,
G4), unless ``failOnDataLoss=false`` accepts the drop. Real Cassandra, real local Spark, real
restarts on one checkpoint.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from support.queues import drain
from support.sink import drop_last_commit

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 180


def _source(spark, options: dict, queue: str, **extra):
    reader = spark.readStream.format("cassieq").options(**options).option("queue", queue)
    for k, v in extra.items():
        reader = reader.option(k, str(v))
    return reader.load()


def test_a_replay_after_the_sink_wrote_is_not_dead_lettered_with_max_delivery_count_1(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """foreachBatch writes batch 0 to dst (writeId of the batch) and then fails once; the
    restart replays batch 0. The source queue's max_delivery_count is 1 (a client's "no
    retry"). Before the fix the replay moved all 10 messages to the dead-letter queue although
    dst had them: dst 10 and DLQ 10. Now the first replay is the same batch: dst has each
    once, the DLQ nothing."""
    src, dst, dlq = f"{queue_name}_src", f"{queue_name}_dst", f"{queue_name}_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(src, bucket_size=100, max_delivery_count=1, dead_letter_queue=dlq)
    queue_client.create_queue(dst)
    sent = [f"m{i}" for i in range(10)]
    queue_client.put_many(src, sent)
    fail_once = tmp_path / "fail-once"
    fail_once.touch()

    def each(df, batch_id):
        (
            df.select("value")
            .write.format("cassieq")
            .options(**cassieq_options)
            .option("queue", dst)
            .option("writeId", f"s2-{batch_id}")
            .mode("append")
            .save()
        )
        if fail_once.exists():
            fail_once.unlink()
            raise RuntimeError("injected: the batch fails after its write")

    def run():
        return (
            _source(sspark, cassieq_options, src, consumerId=f"{queue_name}-c")
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )

    with pytest.raises(Exception, match="injected"):
        run().awaitTermination(TIMEOUT)
    q = run()
    assert q.awaitTermination(TIMEOUT)
    assert q.exception() is None, q.exception()
    assert drain(queue_client, dlq) == Counter(), "the replayed batch was dead-lettered"
    assert drain(queue_client, dst) == Counter(sent)
    st = queue_client.stats(src)
    assert st["backlog"] == 0 and st["dead_lettered"] == 0, st


def test_client_deliveries_do_not_change_a_replayed_batch_for_the_cassieq_sink(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """x was received twice by a client and y once, both let expire; max_delivery_count 3.
    The query (source to the cassieq sink) writes batch 0 (x, y) and crashes before Spark's
    commit log. Before the fix the replay moved x (2 client deliveries + 1 run) and kept y:
    the sink's replay check failed with ReplayMismatchError on every restart until y was moved
    too (x and y then in dst and in the DLQ). Now the replay is the same rows: the sink skips
    them and the batch commits; x and y are in dst once and nowhere else."""
    src, dst, dlq = f"{queue_name}_src", f"{queue_name}_dst", f"{queue_name}_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(src, bucket_size=100, max_delivery_count=3, dead_letter_queue=dlq)
    queue_client.create_queue(dst)
    x = queue_client.put(src, b"x")
    assert queue_client.get(src, visibility_timeout=0.5).id == x
    time.sleep(1.0)
    got = queue_client.get(src, visibility_timeout=2.0)
    assert got.id == x and got.delivery_count == 2
    y = queue_client.put(src, b"y")
    assert queue_client.get(src, visibility_timeout=2.0).id == y
    time.sleep(2.5)  # both due again through their timers
    ckpt = tmp_path / "ck"

    def run(trigger):
        return (
            _source(sspark, cassieq_options, src, consumerId=f"{queue_name}-c")
            .select("value")
            .writeStream.format("cassieq")
            .options(**cassieq_options)
            .option("queue", dst)
            .option("checkpointLocation", str(ckpt))
            .trigger(**trigger)
            .start()
        )

    q = run({"processingTime": "1 hour"})  # batch 0 now; no second trigger (no ack yet)
    deadline = time.time() + TIMEOUT
    while not (ckpt / "commits" / "0").exists():
        assert q.exception() is None, q.exception()
        assert time.time() < deadline, "batch 0 did not commit"
        time.sleep(0.25)
    q.stop()
    assert queue_client.stats(dst)["enqueued"] == 2
    drop_last_commit(ckpt)

    q = run({"availableNow": True})
    assert q.awaitTermination(TIMEOUT)
    assert q.exception() is None, q.exception()
    assert drain(queue_client, dlq) == Counter()
    assert drain(queue_client, dst) == Counter({"x": 1, "y": 1})
    st = queue_client.stats(src)
    assert st["backlog"] == 0 and st["dead_lettered"] == 0, st


def _run_poisoned(spark, cassieq_options, queue: str, ckpt: Path, **extra) -> Exception | None:
    """One AvailableNow run whose foreachBatch fails on the poison message; its error or None."""

    def each(df, batch_id):
        if any(bytes(r.value) == b"poison" for r in df.collect()):
            raise RuntimeError(f"poison in batch {batch_id}")

    q = (
        _source(spark, cassieq_options, queue, consumerId=f"{queue}-c", **extra)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert q.awaitTermination(TIMEOUT), "the run did not end"
    except Exception as exc:  # StreamingQueryException
        return exc
    return q.exception()


def test_a_poison_batch_without_a_dead_letter_queue_fails_the_query_instead_of_being_dropped(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """A queue without a dead-letter queue (the default), max_delivery_count 2, a batch of 10
    with a poison message. Runs 1 and 2 fail on it. Before the fix run 3 dropped the 10
    messages (a WARNING and the `dropped` counter its only trace) and the query went on. Now
    run 3 fails naming the queue, the batch's ids and the ways out, and drops nothing; a run
    with failOnDataLoss=false accepts the drop, counted."""
    queue_client.create_queue(queue_name, bucket_size=10, max_delivery_count=2)
    ids = queue_client.put_many(queue_name, [f"m{i}".encode() for i in range(9)] + [b"poison"])
    ckpt = tmp_path / "ck"
    for run in (1, 2):
        err = _run_poisoned(sspark, cassieq_options, queue_name, ckpt)
        assert err is not None and "poison in batch 0" in str(err), (run, err)
    err = _run_poisoned(sspark, cassieq_options, queue_name, ckpt)
    assert err is not None, "the poison batch was dropped and the query went on"
    text = str(err)
    for fragment in (queue_name, "no dead-letter queue", "failOnDataLoss=false", str(ids[0])):
        assert fragment in text, text[-3000:]
    st = queue_client.stats(queue_name)
    assert st["dropped"] == 0 and st["backlog"] == 10, st

    assert _run_poisoned(sspark, cassieq_options, queue_name, ckpt, failOnDataLoss="false") is None
    st = queue_client.stats(queue_name)
    assert st["dropped"] == 10 and st["backlog"] == 0, st
