"""The Spark rows of the bad-input sweep (``shared/reviews/bad-inputs.md``), one case per row,
id = the row's id; ids ending in ``x`` are a second sweep not in the table. One Spark session
(the session fixture), registered with ``short_errors=True``: the product's one-line message
must then follow Spark's own prefix, with no Python traceback, wherever PySpark honours it.
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


V = "CAST(id AS STRING) AS value"
E = "cassieq_spark.errors."

# (id, action(spark, opts, tmp), expected: regex of the product's line, or None = succeeds)
# fmt: off
SPARK = [
    ("S01", lambda s, o, t: _write(_sel(s, "CAST(id AS STRING) AS v"), o), E + r"ConfigError: the cassieq sink needs a column 'value' \(string or binary\)"),
    ("S02", lambda s, o, t: _write(_sel(s, "id AS value"), o), E + r"ConfigError: column 'value' must be string or binary, got bigint"),
    ("S03", lambda s, o, t: _write(_sel(s, "array(CAST(id AS STRING)) AS value"), o), E + r"ConfigError: column 'value' must be string or binary, got array<string>"),
    ("S04", lambda s, o, t: _write(_sel(s, V, "map('k', 1) AS headers"), o), E + r"ConfigError: column 'headers' must be map<string,string>, got map<string,int>"),
    ("S05", lambda s, o, t: _write(_sel(s, V, "'10' AS delay"), o), E + r"ConfigError: column 'delay' must be double"),
    ("S06", lambda s, o, t: _write(_sel(s, V, "id AS extra"), o), E + r"ConfigError: column 'extra' \(bigint\) is not accepted by the cassieq sink; allowed columns"),
    ("S07", lambda s, o, t: _write(_sel(s, "CASE WHEN id = 1 THEN NULL ELSE CAST(id AS STRING) END AS value"), o), E + r"ConfigError: column 'value' is null at row 1 \(0-based\) of partition 0"),
    ("S08", lambda s, o, t: _write(_sel(s, "CASE WHEN id = 24000 THEN NULL ELSE CAST(id AS STRING) END AS value", n=25000), o), E + r"ConfigError: column 'value' is null at row 24000"),
    ("S09", lambda s, o, t: _write(_values(s), o, foo="bar"), E + r"ConfigError: unknown option 'foo' for the cassieq sink; allowed: "),
    ("S10", lambda s, o, t: _write(_values(s), o, consistency="SUPER"), E + r"ConfigError: consistency must be one of LOCAL_QUORUM, QUORUM, EACH_QUORUM, ALL, got 'SUPER'"),
    ("S11", lambda s, o, t: _write(_values(s), o, queue=None), E + r"ConfigError: option 'queue' is required for the cassieq sink"),
    ("S12", lambda s, o, t: _write(_values(s), o, queue=P + "nosq"), E + r"QueueNotFoundError: queue '\w+nosq' does not exist in keyspace '\w+'; create it .* or set option createQueue=true"),
    ("S14", lambda s, o, t: _write(_values(s), o, createQueue="maybe"), E + r"ConfigError: option 'createQueue' must be true or false, got 'maybe'"),
    ("S15", lambda s, o, t: _write(_values(s), o, bucketSize="10"), E + r"ConfigError: option\(s\) bucketSize only take effect when the queue is created"),
    ("S16", lambda s, o, t: _write(_values(s), o, idBlockSize="0"), E + r"ConfigError: option 'idBlockSize' must be >= 1, got 0"),
    ("S17", lambda s, o, t: _write(_values(s), o, writerType="json"), E + r"ConfigError: option 'writerType' must be one of arrow, rows, got 'json'"),
    ("S18", lambda s, o, t: _write(_sel(s, V, "map('k', CAST(NULL AS STRING)) AS headers"), o), E + r"ConfigError: column 'headers' has a null value at row 0"),
    ("S19", lambda s, o, t: _write(_sel(s, V, "CAST(-5 AS DOUBLE) AS delay"), o), E + r"ConfigError: column 'delay' is -5.0 at row 0 \(0-based\) of partition 0; it must be a finite number of seconds from 0 to 43200"),
    ("S20", lambda s, o, t: _write(_sel(s, V, "CAST(1e300 AS DOUBLE) AS delay"), o), E + r"ConfigError: column 'delay' is 1e\+300 at row 0 .* from 0 to 43200"),
    ("S21", lambda s, o, t: _write(_sel(s, "CASE WHEN id = 5 THEN repeat('x', 2097152) ELSE CAST(id AS STRING) END AS value", n=10), o), E + r"PayloadTooLargeError: column 'value' at row 5 \(0-based\) of partition 0 has 2097152 bytes; queue '\w+' allows at most 1048576"),
    ("S22", lambda s, o, t: _write(_sel(s, V, "map('big', repeat('h', 150000)) AS headers", n=200), o), E + r"PayloadTooLargeError: column 'headers' at row 0 \(0-based\) of partition 0: headers take 150003 bytes; at most 65536 are allowed"),
    ("S23", lambda s, o, t: _write(_values(s), o, mode="overwrite"), E + r"ConfigError: the cassieq sink only appends messages; use mode\('append'\)"),
    ("S24", lambda s, o, t: _write(_values(s), o, queue="x'; DROP KEYSPACE badinput; --"), E + r"ConfigError: invalid queue name \(option 'queue'\) \"x'; DROP KEYSPACE badinput; --\""),
    ("S25", lambda s, o, t: _write(_values(s), o, port="abc"), E + r"ConfigError: option 'port' must be an integer, got 'abc'"),
    ("S26", lambda s, o, t: _load(s, o, maxMessagePerTrigger="10"), E + r"ConfigError: unknown option 'maxmessagepertrigger' for the cassieq source \(did you mean 'maxMessagesPerTrigger'\?\)"),
    ("S27", lambda s, o, t: _load(s, o, maxMessagesPerTrigger="0"), E + r"ConfigError: option 'maxMessagesPerTrigger' must be >= 1, got 0"),
    ("S28", lambda s, o, t: _load(s, o, maxMessagesPerTrigger="-5"), E + r"ConfigError: option 'maxMessagesPerTrigger' must be >= 1, got -5"),
    ("S29", lambda s, o, t: _load(s, o, maxMessagesPerTrigger="lots"), E + r"ConfigError: option 'maxMessagesPerTrigger' must be an integer, got 'lots'"),
    ("S30", lambda s, o, t: _load(s, o, consistency="SUPER"), E + r"ConfigError: consistency must be one of .* got 'SUPER'"),
    ("S31", lambda s, o, t: _load(s, o, queue=None), E + r"ConfigError: option 'queue' is required for the cassieq source"),
    ("S32", lambda s, o, t: _load(s, o, leaseTimeout="1"), E + r"ConfigError: option 'leaseTimeout' must be >= 3.0, got 1"),
    ("S33", lambda s, o, t: s.read.format("cassieq").options(**o).option("queue", P + "nosq").load().count(), E + r"QueueNotFoundError: queue '\w+nosq' does not exist in keyspace"),
    ("S34", lambda s, o, t: _read_stream(s, o, t, writerType="rows"), E + r"ConfigError: unknown option 'writertype' for the cassieq source; allowed: "),
    ("S35", lambda s, o, t: _read_stream(s, o, t, queue=P + "nosq"), E + r"QueueNotFoundError: queue '\w+nosq' does not exist in keyspace"),
    ("S36", lambda s, o, t: _load(s, o, consumerId="a b"), E + r"ConfigError: option 'consumerId' must be 1-100 characters from letters, digits"),
    ("S37", lambda s, o, t: _load(s, o, minIdsPerPartition="10", maxIdsPerPartition="5"), E + r"ConfigError: option 'minIdsPerPartition' \(10\) must not exceed 'maxIdsPerPartition' \(5\)"),
    ("S38", lambda s, o, t: _stream_sink(s, o, t, [{"v": "a"}, {"v": None}, {"v": "c"}]), E + r"ConfigError: column 'value' is null at row 1 \(0-based\) of partition 0"),
    ("S39", lambda s, o, t: _stream_sink(s, o, t, [{"v": "a"}], bucketsise="10"), E + r"ConfigError: unknown option 'bucketsise' for the cassieq sink \(did you mean 'bucketSize'\?\)"),
    ("S40", lambda s, o, t: _write(_sel(s, V, "'k=v' AS headers"), o), E + r"ConfigError: column 'headers' must be map<string,string>, got string"),
    ("S41", lambda s, o, t: _write(_sel(s, V, "CAST(id AS STRING) AS VALUE"), o), E + r"ConfigError: column 'VALUE' appears twice in the input"),
    ("S42", lambda s, o, t: _write(_values(s), o, queue=P + "mp0", createQueue="true", maxPayloadBytes="0"), E + r"ConfigError: invalid queue setting for createQueue: max payload bytes must be from 1 to 15728640, got 0"),
    ("S43", lambda s, o, t: _write(_values(s), o, queue="  "), E + r"ConfigError: option 'queue' is required for the cassieq sink"),
    ("S44", lambda s, o, t: _write(_values(s), o, queue=SQ + "\n"), E + r"ConfigError: invalid queue name \(option 'queue'\) '" + SQ + r"\\n': use 1-200 characters"),
    # second sweep
    ("S60x", lambda s, o, t: _write(_values(s), o, queue=P + "dq", createQueue="true", deadLetterQueue=SQ + "\n"), E + r"ConfigError: .*invalid dead-letter queue name '" + SQ + r"\\n'"),
    ("S45x", lambda s, o, t: _write(_sel(s, V, "map('big', repeat('h', 65000)) AS headers", n=300), o), None),
    ("S46x", lambda s, o, t: _write(_sel(s, V, "CAST(43201 AS DOUBLE) AS delay"), o, writerType="rows"), E + r"ConfigError: column 'delay' is 43201.0 at row 0 .* from 0 to 43200"),
    ("S47x", lambda s, o, t: _write(_values(s), o, consistensy="QUORUM"), E + r"ConfigError: unknown option 'consistensy' for the cassieq sink \(did you mean 'consistency'\?\)"),
    ("S48x", lambda s, o, t: _write(_values(s), o, queue=P + "m", createQueue="true", maxDeliveryCount="1001"), E + r"ConfigError: invalid queue setting for createQueue: max delivery count must be an integer from 1 to 1000, got 1001"),
    ("S49x", lambda s, o, t: _load(s, o, maxMessagesPerTrigger="1e3"), E + r"ConfigError: option 'maxMessagesPerTrigger' must be an integer, got '1e3'"),
    ("S50x", lambda s, o, t: _write(_sel(s, V, "map_from_arrays(transform(sequence(1, 1001), x -> CAST(x AS STRING)), transform(sequence(1, 1001), x -> 'v')) AS headers", n=1), o), E + r"PayloadTooLargeError: column 'headers' at row 0 .* 1001 entries; at most 1000"),
    ("S51x", lambda s, o, t: _write(_values(s), o, queue=P + "vt", createQueue="true", visibilityTimeout="1e300"), E + r"ConfigError: invalid queue setting for createQueue: visibility timeout must be at most 43200 seconds"),
    ("S52x", lambda s, o, t: _write(_values(s), o, queue=P + "ttl", createQueue="true", messageTtl="true"), E + r"ConfigError: option 'messageTtl' must be an integer, got 'true'"),
    ("S53x", lambda s, o, t: _write(_values(s), o, connectTimeout="0"), E + r"ConfigError: connectTimeout must be > 0 seconds, got 0"),
    # issue 16: start position and pacing
    ("S54x", lambda s, o, t: _load(s, o, startingPosition="newest"), E + r"ConfigError: option 'startingPosition' must be earliest, latest, \{\"id\": N\} .* got 'newest'"),
    ("S55x", lambda s, o, t: _load(s, o, minMessagesPerTrigger="10", maxMessagesPerTrigger="5"), E + r"ConfigError: option 'minMessagesPerTrigger' \(10\) must not exceed 'maxMessagesPerTrigger' \(5\)"),
    ("S56x", lambda s, o, t: _load(s, o, minMessagesPerTrigger="2", maxTriggerDelay="soon"), E + r"ConfigError: option 'maxTriggerDelay' must be a duration such as '15s'"),
    # issue 16: lost data
    ("S64x", lambda s, o, t: _load(s, o, failOnDataLoss="sometimes"), E + r"ConfigError: option 'failOnDataLoss' must be true or false, got 'sometimes'"),
    # issue 16: delivery counts across runs
    ("S65x", lambda s, o, t: _load(s, o, countDeliveries="maybe"), E + r"ConfigError: option 'countDeliveries' must be true or false, got 'maybe'"),
    # issue 16: routing in the sink (a 'queue' column); rows with a null queue go to SQ, and
    # nothing of the task may reach it when another row's queue is bad
    ("S57x", lambda s, o, t: _write(_sel(s, V, "id AS queue"), o), E + r"ConfigError: column 'queue' must be string \(the name of the row's queue\), got bigint"),
    ("S58x", lambda s, o, t: _write(_sel(s, V, f"CASE WHEN id = 2 THEN '{P}nosq' END AS queue"), o), E + r"QueueNotFoundError: column 'queue' at row 2 \(0-based\) of partition 0: queue '\w+nosq' does not exist in keyspace '\w+'; create it .* or set option createQueue=true"),
    ("S59x", lambda s, o, t: _write(_sel(s, V, f"CASE WHEN id = 1 THEN '{P}nosq' END AS queue"), o, writerType="rows"), E + r"QueueNotFoundError: column 'queue' at row 1 \(0-based\) of partition 0: queue '\w+nosq' does not exist"),
    ("S61x", lambda s, o, t: _write(_sel(s, V, "CAST(NULL AS STRING) AS queue"), o, queue=None), E + r"ConfigError: column 'queue' is null at row 0 \(0-based\) of partition 0 and option 'queue' \(the queue of such rows\) is not set"),
    ("S62x", lambda s, o, t: _write(_sel(s, V, "CASE WHEN id = 1 THEN 'a b' END AS queue"), o), E + r"ConfigError: invalid queue name \(column 'queue' at row 1 \(0-based\) of partition 0\) 'a b'"),
    ("S63x", lambda s, o, t: _write(_values(s), o, queue=None), E + r"ConfigError: option 'queue' is required for the cassieq sink: .* or a string column 'queue' in the input"),
]
# fmt: on

# Where PySpark does not apply hideTraceback (the streaming source runs its own Python
# process): the product's line ends a traceback instead.
WITH_TRACEBACK = {"S34", "S35"}
RAW = ("UnboundLocalError", "OverflowError", "InvalidRequest", "TypeError", "NoHostAvailable")


@pytest.mark.parametrize("action,expected", [pytest.param(*c[1:], id=c[0]) for c in SPARK])
def test_spark_bad_input(request, sp, cassieq_options, queue_client, tmp_path, action, expected):
    case = request.node.callspec.id
    before = queue_client.stats(SQ)
    if expected is None:  # correct behaviour
        action(sp, dict(cassieq_options), tmp_path)
        after = queue_client.stats(SQ)
        assert after["enqueued"] > before["enqueued"]
        return
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
