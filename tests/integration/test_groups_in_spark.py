"""Message groups through Spark: the sink's ``group`` column puts each row in its group (in the
input's order within a task), a grouped row with a delay fails its task, and ``spark.read``
shows each message's group."""

from __future__ import annotations

import pytest

from cassieq_spark.spark import register

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_sink_group_column_orders_delivery_and_spark_read_shows_it(
    spark, queue_client, queue_name, cassieq_options
):
    register(spark)
    q = queue_client
    q.create_queue(queue_name)
    rows = [(f"a{i}", "a") for i in range(3)] + [(f"b{i}", "b") for i in range(2)] + [("p", None)]
    df = spark.createDataFrame(rows, "value string, group string").coalesce(1)
    df.write.format("cassieq").options(**cassieq_options, queue=queue_name).mode("append").save()

    read = spark.read.format("cassieq").options(**cassieq_options, queue=queue_name).load()
    got = {r["value"].decode(): r["group"] for r in read.select("value", "group").collect()}
    assert got == {v: g for v, g in rows}

    first = q.get_many(queue_name, max_messages=10)
    assert sorted(m.text for m in first) == ["a0", "b0", "p"]
    assert all(q.ack(queue_name, m.pop_receipt) for m in first)
    assert sorted(m.text for m in q.get_many(queue_name, max_messages=10)) == ["a1", "b1"]


def test_a_grouped_row_with_a_delay_fails_its_task(
    spark, queue_client, queue_name, cassieq_options
):
    register(spark)
    queue_client.create_queue(queue_name)
    df = spark.createDataFrame([("x", "g", 5.0)], "value string, group string, delay double")
    with pytest.raises(Exception, match="cannot be delayed"):
        df.write.format("cassieq").options(**cassieq_options, queue=queue_name).mode(
            "append"
        ).save()
    assert queue_client.stats(queue_name)["enqueued"] == 0
