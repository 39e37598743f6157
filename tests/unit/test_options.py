"""Option validation of the cassieq sink and source (pure: no Cassandra, no Spark session)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.option_table import SINK, STREAM, allowed, only_for
from cassieq_spark.spark.options import parse_source_settings, redacted, sink_options
from cassieq_spark.spark.schema import SOURCE_SCHEMA, SOURCE_SCHEMA_DDL
from cassieq_spark.spark.sink import check_input_schema

BASE = {"queue": "events"}


def test_defaults() -> None:
    opts = sink_options({"queue": "events", "path": "x", "checkpointlocation": "/tmp/c"})
    assert opts.common.queue == "events"
    assert opts.common.connection.contact_points == ("127.0.0.1",)
    assert opts.common.connection.port == 9042
    assert opts.common.connection.keyspace == "cassieq"
    assert opts.common.connection.consistency == "LOCAL_QUORUM"
    assert opts.common.create_queue is False
    assert opts.id_block_size == 10_000
    assert opts.writer_type == "arrow"
    assert opts.checkpoint_location == "/tmp/c"


def test_keys_are_case_insensitive_and_connection_parsed() -> None:
    opts = sink_options(
        {
            "QUEUE": "q1",
            "contactPoints": "a:9100,b",
            "KeySpace": "ks",
            "createQueue": "TRUE",
            "bucketSize": "500",
            "idBlockSize": "7",
            "writerType": "ROWS",
        }
    )
    c = opts.common
    assert c.connection.contact_points == ("a", "b")
    assert c.connection.port == 9100
    assert c.connection.keyspace == "ks"
    assert c.create_queue
    assert c.queue_settings["bucket_size"] == 500
    assert opts.id_block_size == 7
    assert opts.writer_type == "rows"


@pytest.mark.parametrize(
    "options, fragments",
    [
        ({}, ["'queue' is required"]),
        ({"queue": "  "}, ["'queue' is required"]),
        ({"queue": "bad name!"}, ["invalid queue name", "'queue'"]),
        ({**BASE, "bucketsise": "5"}, ["unknown option 'bucketsise'", "bucketSize", "idBlockSize"]),
        ({**BASE, "maxMessagesPerTrigger": "5"}, ["unknown option 'maxmessagespertrigger'"]),
        ({**BASE, "consistency": "FOO"}, ["consistency must be one of", "'FOO'"]),
        ({**BASE, "port": "ninety"}, ["'port' must be an integer"]),
        ({**BASE, "username": "u"}, ["username and password go together"]),
        ({**BASE, "createQueue": "maybe"}, ["'createQueue' must be true or false"]),
        ({**BASE, "bucketSize": "100"}, ["bucketSize", "createQueue"]),
        ({**BASE, "createQueue": "true", "bucketSize": "0"}, ["bucket size", "got 0"]),
        ({**BASE, "createQueue": "true", "bucketSize": "x"}, ["'bucketSize' must be an integer"]),
        ({**BASE, "createQueue": "true", "visibilityTimeout": "0"}, ["visibility timeout"]),
        ({**BASE, "createQueue": "true", "deadLetterQueue": "events"}, ["own dead-letter"]),
        ({**BASE, "idBlockSize": "0"}, ["'idBlockSize' must be >= 1"]),
        ({**BASE, "idBlockSize": "10001"}, ["'idBlockSize' must be from 1 to 10000"]),
        ({**BASE, "writerType": "pandas"}, ["'writerType' must be one of arrow, rows"]),
    ],
)
def test_sink_rejects(options: dict, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        sink_options(options)
    for f in fragments:
        assert f in str(err.value)


def test_unknown_option_lists_allowed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        sink_options({**BASE, "Foo": "1"})
    msg = str(err.value)
    assert "unknown option 'foo' for the cassieq sink" in msg
    for name in ("queue", "contactPoints", "password", "createQueue", "idBlockSize", "path"):
        assert name in msg


def test_password_never_in_errors() -> None:
    secret = "S3cr3t-Value"
    for opts in (
        {"queue": "q", "password": secret},  # no username
        {"queue": "q", "password": secret, "username": "u", "port": "x"},
        {"queue": "q", "password": secret, "username": "u", "consistency": "nope"},
        {"password": secret, "username": "u"},
    ):
        with pytest.raises(ConfigError) as err:
            sink_options(opts)
        assert secret not in str(err.value)
    assert redacted({"Password": secret, "queue": "q"}) == {"Password": "*****", "queue": "q"}


def test_source_options_share_common_and_reject_sink_only() -> None:
    opts = parse_source_settings({**BASE, "maxMessagesPerTrigger": "500", "consumerId": "c1"})
    assert opts.common.queue == "events"
    assert opts.max_messages_per_trigger == 500
    assert opts.max_ids_per_partition == 100_000
    assert opts.consumer_id == "c1"
    with pytest.raises(ConfigError, match="'maxMessagesPerTrigger' must be >= 1"):
        parse_source_settings({**BASE, "maxMessagesPerTrigger": "0"})
    with pytest.raises(ConfigError, match="unknown option 'idblocksize' for the cassieq source"):
        parse_source_settings({**BASE, "idBlockSize": "5"})
    assert "maxmessagespertrigger" in only_for(STREAM)
    assert not only_for(SINK) & set(allowed("source"))


def test_source_schema_matches_ddl() -> None:
    # DDL "id BIGINT, ..." and simpleString "struct<id:bigint,...>" name the same fields
    from_ddl = ",".join(
        p.strip().replace(" ", ":", 1).lower() for p in SOURCE_SCHEMA_DDL.split(", ")
    )
    assert SOURCE_SCHEMA.simpleString() == f"struct<{from_ddl}>"
    assert all(f.nullable for f in SOURCE_SCHEMA.fields)
    assert SOURCE_SCHEMA.fieldNames() == [
        "id",
        "value",
        "headers",
        "enqueued_at",
        "bucket",
        "delivery_count",
        "queue",
        "incarnation",
        "group",
    ]


HEADERS = StructField("headers", MapType(StringType(), StringType()))


@pytest.mark.parametrize(
    "fields, ok",
    [
        ([StructField("value", StringType())], True),
        ([StructField("VALUE", BinaryType()), HEADERS, StructField("delay", DoubleType())], True),
        ([StructField("value", StringType()), StructField("delay", LongType())], True),
        ([StructField("value", IntegerType())], "column 'value' must be string or binary, got int"),
        ([HEADERS], "needs a column 'value'"),
        ([StructField("value", StringType()), StructField("key", StringType())], "'key'"),
        (
            [
                StructField("value", StringType()),
                StructField("headers", MapType(StringType(), LongType())),
            ],
            "column 'headers' must be map<string,string>, got map<string,bigint>",
        ),
        (
            [StructField("value", StringType()), StructField("delay", StringType())],
            "column 'delay' must be double",
        ),
    ],
)
def test_input_schema(fields: list, ok: bool | str) -> None:
    schema = StructType(fields)
    if ok is True:
        layout = check_input_schema(schema)
        assert layout.value == 0
        return
    with pytest.raises(ConfigError) as err:
        check_input_schema(schema)
    assert ok in str(err.value)
    if "'key'" in ok:
        assert "allowed columns: value" in str(err.value)


def test_sink_queue_column_makes_option_queue_optional() -> None:
    schema = StructType([StructField("value", StringType()), StructField("Queue", StringType())])
    layout = check_input_schema(schema)
    assert layout.queue == 1
    assert sink_options({}, queue_column=True).default_queue is None
    routed = {**BASE, "routeByColumn": "true"}
    assert sink_options(routed, queue_column=True).default_queue == "events"
    with pytest.raises(ConfigError, match="or a string column 'queue' in the input"):
        sink_options({})
    bad = StructType([StructField("value", StringType()), StructField("queue", LongType())])
    with pytest.raises(ConfigError, match=r"column 'queue' must be string .*got bigint"):
        check_input_schema(bad)
