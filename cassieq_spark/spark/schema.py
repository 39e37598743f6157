"""Spark schemas of the cassieq data source, kept in one place for the sink and the source."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# What the streaming source yields, one row per message. Every field is nullable, as in the DDL
# form, so RecordBatches built with pyarrow's default (nullable) fields match it exactly.
SOURCE_SCHEMA = StructType(
    [
        StructField("id", LongType(), nullable=True),
        StructField("value", BinaryType(), nullable=True),
        StructField("headers", MapType(StringType(), StringType(), True), nullable=True),
        StructField("enqueued_at", TimestampType(), nullable=True),
        StructField("bucket", LongType(), nullable=True),
        StructField("delivery_count", IntegerType(), nullable=True),
        StructField("queue", StringType(), nullable=True),
        # The queue's incarnation (its queue_id): ids restart at 0 when a queue is deleted and
        # created again, so (queue, incarnation, id) is what names one message for ever.
        StructField("incarnation", StringType(), nullable=True),
        # The message's group (header cassieq-group, docs/groups.md); null when ungrouped.
        StructField("group", StringType(), nullable=True),
    ]
)

SOURCE_SCHEMA_DDL = (
    "id BIGINT, value BINARY, headers MAP<STRING,STRING>, enqueued_at TIMESTAMP, "
    "bucket BIGINT, delivery_count INT, queue STRING, incarnation STRING, group STRING"
)

# Columns the sink accepts, and what each may be.
SINK_VALUE = "value"
SINK_HEADERS = "headers"
SINK_DELAY = "delay"
SINK_QUEUE = "queue"  # a row's destination, overriding option 'queue' (Kafka's 'topic')
SINK_GROUP = "group"  # the row's message group (docs/groups.md); null: no group
SINK_DEDUP = "dedupid"  # column `dedupId`: the row's deduplication id (names are case-blind)
SINK_COLUMNS = (SINK_VALUE, SINK_HEADERS, SINK_DELAY, SINK_QUEUE, SINK_GROUP, SINK_DEDUP)
