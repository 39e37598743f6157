"""Dead letters from inside a query (issue 16, item 6, first half): ``dead_letter(rows, ...)``
plus the sink moves rejected messages to their queues' dead-letter queues with their
provenance in headers, once even when Spark replays the batch. Real Cassandra, real Spark."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import functions as F
from support.sink import full_message

import cassieq_spark
from cassieq_spark.spark.dead_letter import HEADER_REASON

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 180


def test_rejected_rows_become_dead_letters_once_across_a_replay(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    a, b, dlq = queue_name + "_a", queue_name + "_b", queue_name + "_dlq"
    queue_client.create_queue(dlq)
    for q in (a, b):
        queue_client.create_queue(q, dead_letter_queue=dlq)
    sent = {q: queue_client.put_many(q, [f"{q}-{i}".encode() for i in range(10)]) for q in (a, b)}
    own = queue_client.put(a, b"a-headers-3", headers={"k": "v", "cassieq-reason": "old"})
    attempts: list[int] = []
    counts: dict[str, int] = {}  # delivery_count of each rejected row, as the stream gave it

    def process(batch, batch_id):
        bad = batch.where(F.col("value").cast("string").endswith("3")).withColumn(
            "why", F.concat(F.lit("ends in 3: "), F.col("value").cast("string"))
        )
        if not attempts:
            counts.update({bytes(r.value).decode(): r.delivery_count for r in bad.collect()})
        (
            cassieq_spark.dead_letter(bad, reason_col="why", **cassieq_options)
            .write.format("cassieq")
            .options(**cassieq_options)
            .option("writeId", f"{queue_name}-dlq-{batch_id}")
            .mode("append")
            .save()
        )
        attempts.append(batch_id)
        if len(attempts) == 1:
            raise RuntimeError("crash after the dead letters were written")

    def run():
        return (
            sspark.readStream.format("cassieq")
            .options(**cassieq_options)
            .option("queues", f"{a},{b}")
            .option("consumerId", queue_name)
            .load()
            .writeStream.foreachBatch(process)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )

    q = run()
    with pytest.raises(Exception, match="crash after the dead letters were written"):
        q.awaitTermination(TIMEOUT)
    q = run()  # replays batch 0: the same writeId writes nothing again
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    assert attempts[:2] == [0, 0]

    letters = []
    while (m := queue_client.get(dlq)) is not None:
        letters.append(m)
        queue_client.ack(dlq, m.pop_receipt)
    got = Counter(m.payload.decode() for m in letters)
    assert got == Counter([f"{a}-3", f"{b}-3", "a-headers-3"])  # each once
    by_payload = {m.payload.decode(): m.headers for m in letters}
    assert by_payload[f"{a}-3"] == {
        "cassieq-origin-queue": a,
        "cassieq-origin-id": str(sent[a][3]),
        "cassieq-delivery-count": str(counts[f"{a}-3"]),
        HEADER_REASON: f"ends in 3: {a}-3",
    }
    assert by_payload[f"{b}-3"]["cassieq-origin-queue"] == b
    # the message's own headers are kept; a provenance header it had is replaced
    assert by_payload["a-headers-3"]["k"] == "v"
    assert by_payload["a-headers-3"][HEADER_REASON] == "ends in 3: a-headers-3"
    assert by_payload["a-headers-3"]["cassieq-origin-id"] == str(own)
    for origin in (a, b):  # the originals were acked with the batch
        assert queue_client.stats(origin)["backlog"] == 0


def test_a_queue_without_dead_letter_queue_fails_the_write(
    sspark, queue_client, queue_name, cassieq_options
):
    queue_client.create_queue(queue_name)
    queue_client.put(queue_name, b"x")
    rows = (
        sspark.read.format("cassieq")
        .options(**cassieq_options)
        .option("queue", queue_name)
        .load()
        .withColumn("reason", F.lit("bad"))
    )
    with pytest.raises(Exception) as err:
        (
            cassieq_spark.dead_letter(rows, **cassieq_options)
            .write.format("cassieq")
            .options(**cassieq_options)
            .mode("append")
            .save()
        )
    text = full_message(err.value)
    assert f"queue {queue_name} has no dead-letter queue" in text, text
    with pytest.raises(cassieq_spark.ConfigError, match="reason column 'why'"):
        cassieq_spark.dead_letter(rows, reason_col="why", **cassieq_options)
