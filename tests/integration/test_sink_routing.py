"""Routing in the sink (issue 16, item 5): a ``queue`` column names each row's queue, as Kafka's
``topic`` column does; null falls back to option ``queue`` when ``routeByColumn=true`` says
so. Every destination gets the
replay-keyed write, so a replayed micro-batch or a retried task writes each row once in its
queue; an unknown queue fails the task with nothing written, unless ``createQueue=true``.

Queues are read back with the client: ``get`` + ``ack`` until empty (``drain``), and the stored
rows (dead ones included) to prove that nothing was written twice or left behind.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from support.queues import drain
from support.sink import (
    TIMEOUT,
    drop_last_commit,
    expected_df,
    full_message,
    stored_df,
    stored_rows,
)

from cassieq_spark.engine.store import faults
from cassieq_spark.errors import QueueNotFoundError
from cassieq_spark.spark.sink import RoutedTask, plan_sink
from cassieq_spark.spark.sink_input import arrow_slices

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _write_json(directory: Path, name: str, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tmp.rename(directory / name)


def _stream(spark, options: dict, src: Path, ckpt: Path, **extra):
    df = (
        spark.readStream.schema("v string, q string")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .selectExpr("v AS value", "q AS queue")
    )
    query = (
        df.writeStream.format("cassieq")
        .options(**options)
        .options(**extra)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT), "streaming query did not finish in time"
    assert query.exception() is None, query.exception()
    return query


def test_stream_routes_rows_and_replay_adds_nothing(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    a, b, c = queue_name + "_a", queue_name + "_b", queue_name + "_c"
    for q in (a, b):
        queue_client.create_queue(q, bucket_size=100)
    # c is created by the sink (createQueue=true); null rows go to a (option 'queue')
    route = {0: a, 1: b, 2: c, 3: None}
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    files = {
        f"f{k}.json": [{"v": f"f{k}-{i}", "q": route[i % 4]} for i in range(80)] for k in (0, 1)
    }
    for name, rows in files.items():
        _write_json(src, name, rows)
    expected: dict[str, list[str]] = {a: [], b: [], c: []}
    for rows in files.values():
        for r in rows:
            expected[r["q"] or a].append(r["v"])
    # several chunks per queue; option 'queue' takes the null rows (routeByColumn=true)
    extra = {"queue": a, "routeByColumn": "true", "createQueue": "true", "idBlockSize": "16"}
    _stream(sspark, cassieq_options, src, ckpt, **extra)
    for q, values in expected.items():
        assert_df_equality(
            stored_df(sspark, queue_client, q).select("value"),
            expected_df(sspark, values).select("value"),
            ignore_row_order=True,
        )

    # a crash after the sink wrote the last batch, before Spark logged its commit: the restart
    # replays it with the same batch id, and every destination finds its blocks by key
    last = drop_last_commit(ckpt)
    query = _stream(sspark, cassieq_options, src, ckpt, **extra)
    replayed = [p for p in query.recentProgress if p.batchId == last and p.numInputRows > 0]
    assert replayed, "the restarted query did not replay the batch"
    assert replayed[0].sink.numOutputRows == replayed[0].numInputRows

    for q, values in expected.items():
        rows = stored_rows(queue_client, q, include_dead=True)
        assert len(rows) == len(values), q  # nothing written twice, nothing rolled back
        assert Counter(bytes(r.payload).decode() for r in rows) == Counter(values), q
        assert queue_client.stats(q)["enqueued"] == len(values), q
    assert drain(queue_client, c) == Counter(expected[c])  # and a consumer gets each once


def test_retried_routed_task_writes_each_queue_once(
    sspark, cassieq_options, queue_client, queue_name
):
    """A task that failed after one destination closed its blocks and before the other did:
    its retry (same write id, same partition) skips the first and completes the second."""
    a, b = queue_name + "_a", queue_name + "_b"
    for q in (a, b):
        queue_client.create_queue(q, bucket_size=100)
    schema = "value string, queue string"
    plan = plan_sink(
        {
            **cassieq_options,
            "idBlockSize": "32",
            "writeId": f"routed-retry-{queue_name}",  # a global writeId: keyspace-wide
            "writeIdScope": "global",
        },
        sspark.createDataFrame([], schema).schema,
        overwrite=False,
        streaming=False,
    )
    assert plan.queue is None and plan.layout.queue == 1
    values = [f"v{i}" for i in range(100)]
    dests = [a if i % 3 else b for i in range(100)]
    batch = pa.record_batch(
        [pa.array(values, pa.string()), pa.array(dests, pa.string())], names=["value", "queue"]
    )

    def crash_in_b(task, **_):
        if task.queue.name == b:
            raise RuntimeError("executor lost")

    faults.on("sink.before_close", crash_in_b)  # a closes first (sorted), then b fails
    task = RoutedTask(plan, partition=0)
    with pytest.raises(RuntimeError):
        task.run(arrow_slices(task.input, iter([batch])))
    faults.reset()

    retry = RoutedTask(plan, partition=0)
    msg = retry.run(arrow_slices(retry.input, iter([batch])))
    want_a = [v for v, d in zip(values, dests, strict=True) if d == a]
    want_b = [v for v, d in zip(values, dests, strict=True) if d == b]
    assert msg.queues == {a: (0, len(want_a)), b: (len(want_b), 0)}
    assert drain(queue_client, a) == Counter(want_a)
    assert drain(queue_client, b) == Counter(want_b)

    stored = {q: len(stored_rows(queue_client, q, include_dead=True)) for q in (a, b)}
    assert stored[a] == len(want_a)  # b also holds the rows of its rolled-back attempt, dead
    again = RoutedTask(plan, partition=0)
    msg = again.run(arrow_slices(again.input, iter([batch])))
    assert (msg.written, msg.replayed) == (0, 100)
    assert {q: len(stored_rows(queue_client, q, include_dead=True)) for q in (a, b)} == stored


def test_unknown_queue_fails_and_writes_nothing(sspark, cassieq_options, queue_client, queue_name):
    a, missing = queue_name + "_a", queue_name + "_missing"
    queue_client.create_queue(a, bucket_size=100)
    df = sspark.createDataFrame(
        [("x0", None), ("x1", a), ("x2", missing), ("x3", a)], "value string, queue string"
    ).coalesce(1)
    with pytest.raises(Exception) as err:
        (
            df.write.format("cassieq")
            .options(**cassieq_options)
            .option("queue", a)
            .option("routeByColumn", "true")
            .mode("append")
            .save()
        )
    text = full_message(err.value)
    assert "QueueNotFoundError" in text and repr(missing) in text and "createQueue" in text, text
    assert "column 'queue' at row 2 (0-based) of partition 0" in text
    assert stored_rows(queue_client, a, include_dead=True) == []
    assert queue_client.stats(a)["enqueued"] == 0
    with pytest.raises(QueueNotFoundError):
        queue_client.get_queue(missing)


@pytest.mark.parametrize("writer_type", ["arrow", "rows"])
def test_create_queue_creates_routed_queues(
    sspark, cassieq_options, queue_client, queue_name, writer_type
):
    """No option 'queue' at all: the column names every queue; createQueue=true creates them
    with the sink's queue settings."""
    x, y = queue_name + "_x", queue_name + "_y"
    rows = [(f"m{i}", x if i % 2 else y) for i in range(40)]
    (
        sspark.createDataFrame(rows, "value string, queue string")
        .repartition(2)
        .write.format("cassieq")
        .options(**cassieq_options)
        .option("createQueue", "true")
        .option("bucketSize", "50")
        .option("writerType", writer_type)
        .mode("append")
        .save()
    )
    for q in (x, y):
        assert queue_client.get_queue(q).bucket_size == 50
        want = [v for v, d in rows if d == q]
        assert drain(queue_client, q) == Counter(want)


def test_plan_needs_queue_option_or_column(cassieq_options, sspark) -> None:
    from cassieq_spark.errors import ConfigError

    schema = sspark.createDataFrame([], "value string").schema
    with pytest.raises(
        ConfigError, match="option 'queue' is required .* or a string column 'queue'"
    ):
        plan_sink(dict(cassieq_options), schema, overwrite=False, streaming=False)
