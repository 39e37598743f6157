"""spark.read.format("cassieq"): a snapshot of the unacked messages that acks nothing."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from cassieq_spark.spark import register
from cassieq_spark.spark.schema import SOURCE_SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.mark.fast  # the smoke tests of make test-fast
def test_batch_read_is_a_snapshot_of_unacked_messages(
    spark, queue_client, queue_name, cassieq_options
):
    register(spark)
    queue_client.create_queue(queue_name, bucket_size=3)
    ids = queue_client.put_many(
        queue_name, [f"v{i}".encode() for i in range(8)], headers={"k": "v"}
    )
    got = queue_client.get(queue_name)
    assert queue_client.ack(queue_name, got.pop_receipt)
    held = queue_client.get(queue_name, visibility_timeout=600)  # delivered, not acked
    delayed = queue_client.put(queue_name, b"later", delay=600)
    before = queue_client.stats(queue_name)

    df = (
        spark.read.format("cassieq")
        .options(**cassieq_options, queue=queue_name, maxIdsPerPartition="2")
        .load()
    )
    assert df.schema == SOURCE_SCHEMA
    expected = spark.createDataFrame(
        [
            (i, f"v{i}".encode(), {"k": "v"}, i // 3, 1 if i == held.id else 0, queue_name)
            for i in ids
            if i != got.id
        ]
        + [(delayed, b"later", {}, delayed // 3, 0, queue_name)],
        "id BIGINT, value BINARY, headers MAP<STRING,STRING>, bucket BIGINT, "
        "delivery_count INT, queue STRING",
    )
    # maps cannot be sorted: compare them as JSON
    flat = [
        F.to_json("headers").alias("headers") if c == "headers" else c for c in expected.columns
    ]
    actual = df.drop("enqueued_at").select(*flat)
    assert_df_equality(actual, expected.select(*flat), ignore_row_order=True, ignore_nullable=True)
    assert df.filter("enqueued_at IS NULL").count() == 0
    assert df.rdd.getNumPartitions() >= 4  # buckets of 3 split into pieces of at most 2
    # reading acked nothing and moved nothing
    after = queue_client.stats(queue_name)
    for key in ("acked", "backlog", "in_flight", "delayed", "reader_pointer"):
        assert after[key] == before[key], key
    assert df.count() == before["backlog"] + before["in_flight"] + before["delayed"]


def test_batch_read_of_an_empty_queue(spark, queue_client, queue_name, cassieq_options):
    register(spark)
    queue_client.create_queue(queue_name)
    df = spark.read.format("cassieq").options(**cassieq_options, queue=queue_name).load()
    assert df.count() == 0


def test_batch_read_rejects_unknown_options(spark, queue_client, queue_name, cassieq_options):
    register(spark)
    queue_client.create_queue(queue_name)
    with pytest.raises(Exception, match="unknown option 'bogus'"):
        spark.read.format("cassieq").options(
            **cassieq_options, queue=queue_name, bogus="1"
        ).load().collect()
