"""The option and schema errors of the Spark connector, checked where the connector checks them:
``plan_sink`` (what ``df.write``/``writeStream`` calls on the driver before it connects) and
``parse_source_settings`` (what ``spark.read``/``readStream.load()`` calls). The rows are the
bad-input sweep's Spark rows whose error comes before any connection (ids as in
``shared/reviews/bad-inputs.md``; ``x``: the second sweep); how such an error reaches the user
through Spark is tested once per way in tests/integration/test_bad_inputs_spark.py."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from pyspark.sql.types import (
    ArrayType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from cassieq_spark.errors import CassieQError
from cassieq_spark.spark.options import parse_source_settings
from cassieq_spark.spark.sink import plan_sink

CONN = {"contactPoints": "127.0.0.1", "port": "9042", "keyspace": "cassieq_test"}
P = "bs1a2b3c_"
SQ = P + "sq"


def col(name: str, kind: DataType) -> StructField:
    return StructField(name, kind)


VALUE = col("value", StringType())


def sink(*columns: StructField, mode: str = "append", streaming: bool = False, **extra) -> None:
    """The sink's planning of ``df.write`` (or ``writeStream`` when ``streaming``) of a frame
    with ``columns`` (default: one string 'value') and the options ``extra`` (None: left out)."""
    options = {k: v for k, v in {**CONN, "queue": SQ, **extra}.items() if v is not None}
    schema = StructType(list(columns) or [VALUE])
    plan_sink(options, schema, overwrite=mode != "append", streaming=streaming)


def source(**extra) -> None:
    """The source's checks at ``load()`` of the options ``extra`` (None: left out)."""
    parse_source_settings(
        {k: v for k, v in {**CONN, "queue": SQ, **extra}.items() if v is not None}
    )


# (id, call, regex of "ErrorClass: message")
# fmt: off
ROWS: list[tuple[str, Callable[[], None], str]] = [
    ("S01", lambda: sink(col("v", StringType())), r"ConfigError: the cassieq sink needs a column 'value' \(string or binary\)"),
    ("S02", lambda: sink(col("value", LongType())), r"ConfigError: column 'value' must be string or binary, got bigint"),
    ("S03", lambda: sink(col("value", ArrayType(StringType()))), r"ConfigError: column 'value' must be string or binary, got array<string>"),
    ("S04", lambda: sink(VALUE, col("headers", MapType(StringType(), IntegerType()))), r"ConfigError: column 'headers' must be map<string,string>, got map<string,int>"),
    ("S05", lambda: sink(VALUE, col("delay", StringType())), r"ConfigError: column 'delay' must be double"),
    ("S06", lambda: sink(VALUE, col("extra", LongType())), r"ConfigError: column 'extra' \(bigint\) is not accepted by the cassieq sink; allowed columns"),
    ("S09", lambda: sink(foo="bar"), r"ConfigError: unknown option 'foo' for the cassieq sink; allowed: "),
    ("S10", lambda: sink(consistency="SUPER"), r"ConfigError: consistency must be one of LOCAL_QUORUM, QUORUM, EACH_QUORUM, ALL, got 'SUPER'"),
    ("S11", lambda: sink(queue=None), r"ConfigError: option 'queue' is required for the cassieq sink"),
    ("S14", lambda: sink(createQueue="maybe"), r"ConfigError: option 'createQueue' must be true or false, got 'maybe'"),
    ("S15", lambda: sink(bucketSize="10"), r"ConfigError: option\(s\) bucketSize only take effect when the queue is created"),
    ("S16", lambda: sink(idBlockSize="0"), r"ConfigError: option 'idBlockSize' must be >= 1, got 0"),
    ("S17", lambda: sink(writerType="json"), r"ConfigError: option 'writerType' must be one of arrow, rows, got 'json'"),
    ("S23", lambda: sink(mode="overwrite"), r"ConfigError: the cassieq sink only appends messages; use mode\('append'\)"),
    ("S24", lambda: sink(queue="x'; DROP KEYSPACE badinput; --"), r"ConfigError: invalid queue name \(option 'queue'\) \"x'; DROP KEYSPACE badinput; --\""),
    ("S25", lambda: sink(port="abc"), r"ConfigError: option 'port' must be an integer, got 'abc'"),
    ("S26", lambda: source(maxMessagePerTrigger="10"), r"ConfigError: unknown option 'maxmessagepertrigger' for the cassieq source \(did you mean 'maxMessagesPerTrigger'\?\)"),
    ("S27", lambda: source(maxMessagesPerTrigger="0"), r"ConfigError: option 'maxMessagesPerTrigger' must be >= 1, got 0"),
    ("S28", lambda: source(maxMessagesPerTrigger="-5"), r"ConfigError: option 'maxMessagesPerTrigger' must be >= 1, got -5"),
    ("S29", lambda: source(maxMessagesPerTrigger="lots"), r"ConfigError: option 'maxMessagesPerTrigger' must be an integer, got 'lots'"),
    ("S30", lambda: source(consistency="SUPER"), r"ConfigError: consistency must be one of .* got 'SUPER'"),
    ("S31", lambda: source(queue=None), r"ConfigError: option 'queue' is required for the cassieq source"),
    ("S32", lambda: source(leaseTimeout="1"), r"ConfigError: option 'leaseTimeout' must be >= 3.0, got 1"),
    ("S34", lambda: source(writerType="rows"), r"ConfigError: unknown option 'writertype' for the cassieq source; allowed: "),
    ("S36", lambda: source(consumerId="a b"), r"ConfigError: option 'consumerId' must be 1-100 characters from letters, digits"),
    ("S37", lambda: source(minIdsPerPartition="10", maxIdsPerPartition="5"), r"ConfigError: option 'minIdsPerPartition' \(10\) must not exceed 'maxIdsPerPartition' \(5\)"),
    ("S39", lambda: sink(streaming=True, bucketsise="10"), r"ConfigError: unknown option 'bucketsise' for the cassieq sink \(did you mean 'bucketSize'\?\)"),
    ("S40", lambda: sink(VALUE, col("headers", StringType())), r"ConfigError: column 'headers' must be map<string,string>, got string"),
    ("S41", lambda: sink(VALUE, col("VALUE", StringType())), r"ConfigError: column 'VALUE' appears twice in the input"),
    ("S42", lambda: sink(queue=P + "mp0", createQueue="true", maxPayloadBytes="0"), r"ConfigError: invalid queue setting for createQueue: max payload bytes must be from 1 to 15728640, got 0"),
    ("S43", lambda: sink(queue="  "), r"ConfigError: option 'queue' is required for the cassieq sink"),
    ("S44", lambda: sink(queue=SQ + "\n"), r"ConfigError: invalid queue name \(option 'queue'\) '" + SQ + r"\\n': use 1-200 characters"),
    ("S60x", lambda: sink(queue=P + "dq", createQueue="true", deadLetterQueue=SQ + "\n"), r"ConfigError: .*invalid dead-letter queue name '" + SQ + r"\\n'"),
    ("S47x", lambda: sink(consistensy="QUORUM"), r"ConfigError: unknown option 'consistensy' for the cassieq sink \(did you mean 'consistency'\?\)"),
    ("S48x", lambda: sink(queue=P + "m", createQueue="true", maxDeliveryCount="1001"), r"ConfigError: invalid queue setting for createQueue: max delivery count must be an integer from 1 to 1000, got 1001"),
    ("S49x", lambda: source(maxMessagesPerTrigger="1e3"), r"ConfigError: option 'maxMessagesPerTrigger' must be an integer, got '1e3'"),
    ("S51x", lambda: sink(queue=P + "vt", createQueue="true", visibilityTimeout="1e300"), r"ConfigError: invalid queue setting for createQueue: visibility timeout must be at most 43200 seconds"),
    ("S52x", lambda: sink(queue=P + "ttl", createQueue="true", messageTtl="true"), r"ConfigError: option 'messageTtl' must be an integer, got 'true'"),
    ("S53x", lambda: sink(connectTimeout="0"), r"ConfigError: connectTimeout must be > 0 seconds, got 0"),
    ("S54x", lambda: source(startingPosition="newest"), r"ConfigError: option 'startingPosition' must be earliest, latest, \{\"id\": N\} .* got 'newest'"),
    ("S55x", lambda: source(minMessagesPerTrigger="10", maxMessagesPerTrigger="5"), r"ConfigError: option 'minMessagesPerTrigger' \(10\) must not exceed 'maxMessagesPerTrigger' \(5\)"),
    ("S56x", lambda: source(minMessagesPerTrigger="2", maxTriggerDelay="soon"), r"ConfigError: option 'maxTriggerDelay' must be a duration such as '15s'"),
    ("S64x", lambda: source(failOnDataLoss="sometimes"), r"ConfigError: option 'failOnDataLoss' must be true or false, got 'sometimes'"),
    ("S65x", lambda: source(countDeliveries="maybe"), r"ConfigError: option 'countDeliveries' must be true or false, got 'maybe'"),
    ("S57x", lambda: sink(VALUE, col("queue", LongType())), r"ConfigError: column 'queue' must be string \(the name of the row's queue\), got bigint"),
    ("S63x", lambda: sink(queue=None), r"ConfigError: option 'queue' is required for the cassieq sink: .* or a string column 'queue' in the input"),
]
# fmt: on


@pytest.mark.parametrize("call,expected", [pytest.param(c, e, id=i) for i, c, e in ROWS])
def test_a_bad_option_or_column_is_refused_before_connecting(call, expected):
    with pytest.raises(CassieQError) as info:
        call()
    line = f"{type(info.value).__name__}: {info.value}"
    assert "\n" not in str(info.value), line
    assert re.search(expected, line), line
