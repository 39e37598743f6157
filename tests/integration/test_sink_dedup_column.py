"""The sink's optional ``dedupId`` column: a row with a deduplication id is enqueued once per id
within the deduplication window, whoever sends it (another write, a client ``put``), and a
replayed write finds it; rows without one keep the sink's replay keys. ``createQueue=true``
refuses an existing queue whose settings differ from the options given."""

from __future__ import annotations

from collections import Counter

import pytest
from support.queues import drain
from support.sink import full_message

from cassieq_spark import QueueSettingsMismatchError

pytestmark = pytest.mark.integration


def _write(spark, options, rows, queue, writer_type="arrow", **extra):
    (
        spark.createDataFrame(rows, "value string, dedupId string")
        .repartition(2)
        .write.format("cassieq")
        .options(**options)
        .option("queue", queue)
        .option("writerType", writer_type)
        .options(**extra)
        .mode("append")
        .save()
    )


@pytest.mark.parametrize("writer_type", ["arrow", "rows"])
def test_rows_with_a_dedup_id_are_enqueued_once_per_id(
    sspark, cassieq_options, queue_client, queue_name, writer_type
):
    queue_client.create_queue(queue_name)
    first = queue_client.put(queue_name, "from a producer", dedup_id="p-1")
    rows = [(f"r{i}", f"id-{i % 5}") for i in range(10)] + [("plain", None), ("dup", "p-1")]
    _write(sspark, cassieq_options, rows, queue_name, writer_type)
    # a second write of the same rows (another write id: not a replay) adds only "plain"
    _write(sspark, cassieq_options, rows, queue_name, writer_type)
    got = drain(queue_client, queue_name)
    assert sum(got.values()) == 5 + 2 + 1  # five ids, "plain" twice, the producer's one
    assert got["plain"] == 2 and got["from a producer"] == 1 and got["dup"] == 0
    assert queue_client.put(queue_name, "again", dedup_id="id-0") != first


def test_a_bad_dedup_id_fails_the_write_naming_its_row(
    sspark, cassieq_options, queue_client, queue_name
):
    queue_client.create_queue(queue_name)
    with pytest.raises(Exception) as err:
        (
            sspark.createDataFrame([("a", "ok"), ("b", "not ok")], "value string, dedupId string")
            .coalesce(1)
            .write.format("cassieq")
            .options(**cassieq_options)
            .option("queue", queue_name)
            .mode("append")
            .save()
        )
    text = full_message(err.value)
    assert "column 'dedupId' at row 1 (0-based) of partition 0" in text, text
    assert queue_client.peek(queue_name) == []
    df = sspark.createDataFrame([("a", 1)], "value string, dedupId int")
    with pytest.raises(Exception, match="column 'dedupId' must be string"):
        df.write.format("cassieq").options(**cassieq_options).option("queue", queue_name).mode(
            "append"
        ).save()


def test_create_queue_true_refuses_other_settings_naming_each(
    sspark, cassieq_options, queue_client, queue_name
):
    queue_client.create_queue(queue_name, visibility_timeout=60, bucket_size=100)
    with pytest.raises(Exception) as err:
        _write(
            sspark,
            cassieq_options,
            [("a", None)],
            queue_name,
            createQueue="true",
            visibilityTimeout="30",
            bucketSize="100",
        )
    text = full_message(err.value)
    assert QueueSettingsMismatchError.__name__ in text, text
    assert "visibility_timeout 60.0 (asked 30.0)" in text and "bucket_size" not in text
    # options left out are not compared: the queue is used as it is
    _write(sspark, cassieq_options, [("b", None)], queue_name, createQueue="true")
    assert drain(queue_client, queue_name) == Counter({"b": 1})
