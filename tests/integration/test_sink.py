"""The cassieq sink against the real Cassandra and a real local Spark.

Rows are read back straight from the messages table (``read_range``), so a duplicate, a lost
row or a half-written failed task shows up whether or not a consumer would deliver it.
"""

from __future__ import annotations

import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from support.sink import (
    TIMEOUT,
    drop_last_commit,
    expected_df,
    full_message,
    run_available_now,
    stored_df,
    stored_rows,
    write_text_files,
)

from cassieq_spark.engine.core import messages, monoton


@pytest.mark.parametrize("writer_type", ["arrow", "rows"])
def test_batch_write_lands_every_row_once(
    sspark, cassieq_options, queue_client, queue_name, writer_type
):
    n = 3000
    df = sspark.range(n).select(
        F.concat(F.lit("msg-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 3 == 0, F.lit(None))
        .otherwise(F.create_map(F.lit("n"), F.col("id").cast("string"), F.lit("src"), F.lit("t")))
        .alias("headers"),
    )
    (
        df.repartition(3)
        .write.format("cassieq")
        .options(**cassieq_options)
        .option("queue", queue_name)
        .option("createQueue", "true")
        .option("bucketSize", "500")  # several buckets per task
        .option("writerType", writer_type)
        .mode("append")
        .save()
    )
    values = [f"msg-{i}" for i in range(n)]
    headers = [None if i % 3 == 0 else {"n": str(i), "src": "t"} for i in range(n)]
    assert_df_equality(
        stored_df(sspark, queue_client, queue_name),
        expected_df(sspark, values, headers),
        ignore_row_order=True,
    )
    ids = [r.id for r in stored_rows(queue_client, queue_name, include_dead=True)]
    assert len(ids) == n == len(set(ids))
    # readers may read all of it: every reservation is closed
    info = queue_client.get_queue(queue_name)
    assert monoton.horizon(queue_client.conn, info, 0).safe_end == n
    assert queue_client.stats(queue_name)["enqueued"] == n


def test_stream_replay_after_lost_commit_adds_nothing(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    files = {f"f{k}.txt": [f"file{k}-line{i}" for i in range(300)] for k in range(2)}
    write_text_files(src, files)
    extra = {"createQueue": "true", "idBlockSize": "128"}  # 3 chunks per task
    run_available_now(sspark, cassieq_options, queue_name, src, ckpt, **extra)
    expected = [line for lines in files.values() for line in lines]
    assert_df_equality(
        stored_df(sspark, queue_client, queue_name).select("value"),
        expected_df(sspark, expected).select("value"),
        ignore_row_order=True,
    )

    # A crash after the sink wrote batch 1 but before Spark logged its commit: on restart Spark
    # runs batch 1 again with the same offsets.
    last = drop_last_commit(ckpt)
    query = run_available_now(sspark, cassieq_options, queue_name, src, ckpt, **extra)
    replayed = [p for p in query.recentProgress if p.batchId == last and p.numInputRows > 0]
    assert replayed, "the restarted query did not replay the batch"
    assert replayed[0].sink.numOutputRows == 300

    assert_df_equality(
        stored_df(sspark, queue_client, queue_name).select("value"),
        expected_df(sspark, expected).select("value"),
        ignore_row_order=True,
    )
    assert len(stored_rows(queue_client, queue_name, include_dead=True)) == len(expected)


def test_two_queries_write_one_queue(sspark, cassieq_options, queue_client, queue_name, tmp_path):
    queue_client.create_queue(queue_name, bucket_size=100)
    queries, expected = [], []
    for q in range(2):
        src = tmp_path / f"in{q}"
        files = {f"f{k}.txt": [f"q{q}-f{k}-{i}" for i in range(400)] for k in range(2)}
        write_text_files(src, files)
        expected += [line for lines in files.values() for line in lines]
        df = sspark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(src))
        queries.append(
            df.writeStream.format("cassieq")
            .options(**cassieq_options)
            .option("queue", queue_name)
            .option("idBlockSize", "150")
            .option("checkpointLocation", str(tmp_path / f"ckpt{q}"))
            .trigger(availableNow=True)
            .start()
        )
    for query in queries:
        assert query.awaitTermination(TIMEOUT)
        assert query.exception() is None, query.exception()
    rows = stored_rows(queue_client, queue_name, include_dead=True)
    assert len({r.id for r in rows}) == len(rows) == len(expected)
    assert sorted(bytes(r.payload).decode() for r in rows) == sorted(expected)


# -- bad inputs: each fails with a clear message and leaves the queue as it was ----------------

PRESET = ["keep-1", "keep-2", "keep-3"]


def _df(spark, kind: str):
    value = F.col("id").cast("string")
    base = spark.range(0, 600, numPartitions=1)
    if kind == "extra column":
        return base.select(value.alias("value"), F.col("id").alias("key"))
    if kind == "int value":
        return base.select(F.col("id").cast("int").alias("value"))
    if kind == "bad headers":
        return base.select(value.alias("value"), F.create_map(value, F.col("id")).alias("headers"))
    if kind == "no value":
        return base.select(value.alias("payload"))
    if kind == "null value":
        return base.select(F.when(F.col("id") == 457, None).otherwise(value).alias("value"))
    if kind == "oversize":
        return base.select(
            F.when(F.col("id") == 321, F.lit("x" * 150)).otherwise(value).alias("value")
        )
    if kind == "negative delay":
        return base.select(
            value.alias("value"), F.when(F.col("id") == 9, -1.0).otherwise(0.0).alias("delay")
        )
    return base.select(value.alias("value"))


# (case, dataframe kind, options to add (None removes), save mode, fragments of the message)
BAD_INPUTS = [
    ("unknown column", "extra column", {}, "append", ["column 'key'", "allowed columns: value"]),
    ("wrong value type", "int value", {}, "append", ["column 'value' must be string or binary"]),
    ("wrong headers type", "bad headers", {}, "append", ["'headers' must be map<string,string>"]),
    ("missing value", "no value", {}, "append", ["needs a column 'value'", "payload"]),
    ("null value", "null value", {}, "append", ["column 'value' is null at row 457"]),
    ("missing queue", "ok", {"queue": None}, "append", ["option 'queue' is required"]),
    (
        "unknown queue",
        "ok",
        {"queue": "nosuch"},
        "append",
        ["'nosuch' does not exist", "createQueue"],
    ),
    (
        "bad contact point",
        "ok",
        {"port": "1", "connectTimeout": "3"},
        "append",
        ["cannot reach Cassandra at 127.0.0.1:1", "contactPoints"],
    ),
    # The test Cassandra runs without authentication, so wrong credentials are accepted there;
    # what can be tested is a half-given login, refused before connecting.
    ("credentials", "ok", {"username": "bob"}, "append", ["username and password go together"]),
    (
        "invalid bucket size",
        "ok",
        {"queue": "other", "createQueue": "true", "bucketSize": "0"},
        "append",
        ["bucket size must be an integer", "got 0"],
    ),
    ("oversize payload", "oversize", {}, "append", ["row 321", "150 bytes", "at most 100"]),
    ("bad consistency", "ok", {"consistency": "FOO"}, "append", ["consistency must be one of"]),
    ("unknown option", "ok", {"bucketsise": "5"}, "append", ["unknown option 'bucketsise'"]),
    ("overwrite", "ok", {}, "overwrite", ["only appends"]),
    ("negative delay", "negative delay", {}, "append", ["column 'delay' is -1.0 at row 9"]),
]


@pytest.mark.parametrize(
    "case, kind, extra, mode, fragments", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_fails_clearly_and_changes_nothing(
    sspark, cassieq_options, queue_client, queue_name, case, kind, extra, mode, fragments
):
    queue_client.create_queue(queue_name, bucket_size=100, max_payload_bytes=100)
    queue_client.put_many(queue_name, PRESET)
    other = f"{queue_name}_x"
    options = {
        **cassieq_options,
        "queue": queue_name,
        "idBlockSize": "100",
        "password": "pw-SECRET",
    }
    options["username"] = "u"
    for key, value in extra.items():
        value = other if value in ("nosuch", "other") else value
        fragments = [f.replace("nosuch", other) for f in fragments]
        if value is None:
            options.pop(key)
        else:
            options[key] = value
    if case == "credentials":
        options.pop("password")
    writer = _df(sspark, kind).write.format("cassieq").options(**options).mode(mode)
    with pytest.raises(Exception) as err:
        writer.save()
    msg = str(err.value)
    for f in fragments:
        assert f in msg, f"{case}: {f!r} not in {msg[:3000]}"
    assert "pw-SECRET" not in msg
    live = stored_rows(queue_client, queue_name)
    assert [bytes(r.payload).decode() for r in live] == PRESET
    info = queue_client.get_queue(queue_name)
    assert monoton.horizon(queue_client.conn, info, 0).open_count == 0
    assert other not in {q.name for q in queue_client.list_queues()}


def test_null_value_in_stream_rolls_back_written_chunks(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """A task that wrote 4 chunks before hitting a null leaves nothing visible."""
    queue_client.create_queue(queue_name, bucket_size=100)
    src = tmp_path / "in"
    write_text_files(src, {"f.txt": [f"l{i}" for i in range(500)]})
    df = sspark.readStream.format("text").load(str(src))
    df = df.select(F.when(F.col("value") == "l450", None).otherwise(F.col("value")).alias("value"))
    # Big inputs reach the writer in many Arrow batches; small batches make this one do too,
    # so the chunks before the null are written before the null is seen.
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = sspark.conf.get(key)
    sspark.conf.set(key, "50")
    try:
        query = (
            df.writeStream.format("cassieq")
            .options(**cassieq_options)
            .option("queue", queue_name)
            .option("idBlockSize", "100")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            query.awaitTermination(TIMEOUT)
    finally:
        sspark.conf.set(key, before)
    assert time.monotonic() - started < TIMEOUT
    assert "column 'value' is null at row 450" in full_message(err.value)
    all_rows = stored_rows(queue_client, queue_name, include_dead=True)
    assert len(all_rows) >= 400, "the chunks before the null were not written: test proves nothing"
    assert stored_rows(queue_client, queue_name) == []
    info = queue_client.get_queue(queue_name)
    assert monoton.horizon(queue_client.conn, info, 0).open_count == 0


def test_task_after_crashed_attempt_rewrites_same_ids(cassieq_options, queue_client, queue_name):
    """An attempt that died mid-write (no rollback ran) left an open keyed block; the retry
    rewrites the same ids and closes it. Runs the task code directly, as a retried Spark task
    of a batch write would (same write id, same partition)."""
    import pyarrow as pa

    from cassieq_spark.spark.options import resolve_queue, sink_options
    from cassieq_spark.spark.sink import InputLayout, SinkPlan, TaskWrite
    from cassieq_spark.spark.sink_input import arrow_slices as _arrow_slices

    queue_client.create_queue(queue_name, bucket_size=100)
    opts = sink_options({**cassieq_options, "queue": queue_name, "idBlockSize": "64"})
    info = resolve_queue(queue_client.conn, opts.common)
    plan = SinkPlan(opts, info, InputLayout(0, True, None, None), False, "crashed-write")
    values = [f"v{i}" for i in range(150)]  # chunks of 64, 64, 22

    # the dead attempt: reserved chunk 0 under its key and wrote half of it, then vanished
    first = monoton.reserve_keyed(queue_client.conn, info, "w:crashed-write:0:0", 64)
    messages.write_messages(queue_client.conn, info, first.lo, [v.encode() for v in values[:32]])

    task = TaskWrite(plan)
    batch = pa.record_batch([pa.array(values, pa.string())], names=["value"])
    msg = task.run(_arrow_slices(task.input, iter([batch])))
    assert msg.written == 150 and msg.replayed == 0
    assert msg.blocks[0] == (first.lo, first.hi)
    rows = stored_rows(queue_client, queue_name, include_dead=True)
    assert [bytes(r.payload).decode() for r in rows] == values
    assert monoton.horizon(queue_client.conn, info, 0).open_count == 0

    # and a further replay of the finished task writes nothing
    again = TaskWrite(plan)
    msg = again.run(_arrow_slices(again.input, iter([batch])))
    assert msg.written == 0 and msg.replayed == 150
    assert len(stored_rows(queue_client, queue_name, include_dead=True)) == 150
