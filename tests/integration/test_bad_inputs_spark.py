"""How a bad input's error reaches the user through Spark, once per way it surfaces: at
``readStream.load()`` (S26), at ``writeStream.start()`` (S39) and ``readStream...start()`` (S35,
where PySpark keeps the traceback: the streaming source runs in its own Python process), at
``df.write.save()`` (S23), from a task's row in a batch write (S07) and in a micro-batch (S38),
and from a batch read (S33). Ids are the rows of the bad-input sweep
(``shared/reviews/bad-inputs.md``). One Spark session, registered with ``short_errors=True``: the
product's one-line message must follow Spark's own prefix, with no Python traceback, wherever
PySpark honours it, and nothing is written.

The other Spark rows of the sweep check an option or a column before anything connects
(tests/unit/test_spark_option_errors.py, the same inputs and messages) or a row inside a task
(tests/integration/test_sink_row_errors.py: the task fed as an executor feeds it, without Spark).
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from pyspark.sql import functions as F

from cassieq_spark.spark import HIDE_TRACEBACK_CONF, register

pytestmark = pytest.mark.integration

P = f"bs{uuid.uuid4().hex[:6]}_"
SQ = P + "sq"


@pytest.fixture(scope="module")
def sp(spark, queue_client):
    before = spark.conf.get(HIDE_TRACEBACK_CONF, "false")
    register(spark, short_errors=True)
    queue_client.create_queue(SQ, exist_ok=True)
    yield spark
    spark.conf.set(HIDE_TRACEBACK_CONF, before)


def _values(spark, n=3, parts=1):
    return spark.range(0, n, 1, parts).select(F.col("id").cast("string").alias("value"))


def _write(df, opts, mode="append", queue=SQ, **extra):
    w = df.write.format("cassieq").mode(mode)
    options = {**opts, "queue": queue, **extra}
    for k, v in options.items():
        if v is not None:
            w = w.option(k, v)
    w.save()


def _read_stream(spark, opts, tmp, queue=SQ, **extra):
    r = spark.readStream.format("cassieq")
    for k, v in {**opts, "queue": queue, **extra}.items():
        if v is not None:
            r = r.option(k, v)
    df = r.load()
    q = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(60)
    finally:
        q.stop()
    if q.exception() is not None:
        raise q.exception()


def _load(spark, opts, queue=SQ, **extra):
    r = spark.readStream.format("cassieq")
    for k, v in {**opts, "queue": queue, **extra}.items():
        if v is not None:
            r = r.option(k, v)
    return r.load()


def _stream_sink(spark, opts, tmp, rows, **extra):
    src = tmp / "in"
    src.mkdir()
    (src / "a.json").write_text("\n".join(json.dumps(r) for r in rows))
    df = spark.readStream.schema("v string").json(str(src)).selectExpr("v AS value")
    w = df.writeStream.format("cassieq").option("checkpointLocation", str(tmp / "ck"))
    for k, v in {**opts, "queue": SQ, **extra}.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start()
    try:
        q.awaitTermination(60)
    finally:
        q.stop()
    if q.exception() is not None:
        raise q.exception()


def _sel(spark, *exprs, n=3):
    return spark.range(0, n, 1, 1).selectExpr(*exprs)


E = "cassieq_spark.errors."

# (id, action(spark, opts, tmp), regex of the product's line)
# fmt: off
SPARK = [
    ("S07", lambda s, o, t: _write(_sel(s, "CASE WHEN id = 1 THEN NULL ELSE CAST(id AS STRING) END AS value"), o), E + r"ConfigError: column 'value' is null at row 1 \(0-based\) of partition 0"),
    ("S23", lambda s, o, t: _write(_values(s), o, mode="overwrite"), E + r"ConfigError: the cassieq sink only appends messages; use mode\('append'\)"),
    ("S26", lambda s, o, t: _load(s, o, maxMessagePerTrigger="10"), E + r"ConfigError: unknown option 'maxmessagepertrigger' for the cassieq source \(did you mean 'maxMessagesPerTrigger'\?\)"),
    ("S33", lambda s, o, t: s.read.format("cassieq").options(**o).option("queue", P + "nosq").load().count(), E + r"QueueNotFoundError: queue '\w+nosq' does not exist in keyspace"),
    ("S35", lambda s, o, t: _read_stream(s, o, t, queue=P + "nosq"), E + r"QueueNotFoundError: queue '\w+nosq' does not exist in keyspace"),
    ("S38", lambda s, o, t: _stream_sink(s, o, t, [{"v": "a"}, {"v": None}, {"v": "c"}]), E + r"ConfigError: column 'value' is null at row 1 \(0-based\) of partition 0"),
    ("S39", lambda s, o, t: _stream_sink(s, o, t, [{"v": "a"}], bucketsise="10"), E + r"ConfigError: unknown option 'bucketsise' for the cassieq sink \(did you mean 'bucketSize'\?\)"),
]
# fmt: on

# Where PySpark does not apply hideTraceback (the streaming source runs its own Python
# process): the product's line ends a traceback instead.
WITH_TRACEBACK = {"S35"}
RAW = ("UnboundLocalError", "OverflowError", "InvalidRequest", "TypeError", "NoHostAvailable")


FAST = {"S26"}  # the smoke test of make test-fast: an error through Spark


@pytest.mark.parametrize(
    "action,expected",
    [
        pytest.param(*c[1:], id=c[0], marks=[pytest.mark.fast] if c[0] in FAST else [])
        for c in SPARK
    ],
)
def test_spark_bad_input(request, sp, cassieq_options, queue_client, tmp_path, action, expected):
    case = request.node.callspec.id
    before = queue_client.stats(SQ)
    with pytest.raises(Exception) as info:
        action(sp, dict(cassieq_options), tmp_path)
    text = str(info.value)
    lines = [line for line in text.split("\n") if E in line]
    assert lines and re.search(expected, lines[-1]), text[-3000:]
    assert not any(raw in text for raw in RAW), text[-3000:]
    if case not in WITH_TRACEBACK:
        # Spark's prefix, then our line: the first or second line of the message
        assert "Traceback" not in text, text[:3000]
        assert any(re.search(expected, line) for line in text.split("\n")[:2]), text[:3000]
    after = queue_client.stats(SQ)
    assert (after["enqueued"], after["backlog"]) == (before["enqueued"], before["backlog"])


@pytest.mark.parametrize(
    "row, build, expected",
    [
        pytest.param(
            "N353",
            lambda: {"reason_col": F.col("reason")},
            r"reason_col must be the name of a column of rows, got Column.* add it as a column",
            id="N353",
        ),
        pytest.param(
            "N363",
            lambda: {},
            r"column 'id' must be the source's message id \(bigint\), got string",
            id="N363",
        ),
    ],
)
def test_dead_letter_arguments_only_a_dataframe_shows(sp, cassieq_options, row, build, expected):
    """dead_letter(...) on rows that are not the source's: a Column as reason_col (N353, a raw
    TypeError 'unhashable type') and a string id (N363, written as the origin id without a
    word) are one-line errors when dead_letter is called, before any job."""
    from cassieq_spark import ConfigError, dead_letter

    rows = sp.createDataFrame(
        [("abc", "p1", "bad", SQ)], "id string, value string, reason string, queue string"
    )
    if row == "N353":
        rows = rows.withColumn("id", F.lit(1).cast("bigint"))
    with pytest.raises(ConfigError) as info:
        dead_letter(rows, **build(), **cassieq_options)
    assert re.search(expected, str(info.value)) and "\n" not in str(info.value), str(info.value)
