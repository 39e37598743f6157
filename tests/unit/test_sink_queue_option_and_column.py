"""Option ``queue`` and a ``queue`` column in the sink's input never meet silently.

Rows passed on from the cassieq source carry their source queue in ``queue``; with the column
winning over the option, ``readStream(queue=A) ... writeStream(queue=B)`` wrote every row back
into A (consumed again the next trigger, for ever) and nothing into B, without a word
(spark-semantics review 2, S4; Kafka's sink lets option ``topic`` win). Both together are now
refused unless ``routeByColumn=true`` asks for routing with the option as the null rows' queue.
Pure: the driver-side checks of ``plan_sink``, no Cassandra, no Spark session.
"""

from __future__ import annotations

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.options import sink_options
from cassieq_spark.spark.schema import SOURCE_SCHEMA
from cassieq_spark.spark.sink_input import check_input_schema


def _passed_through_source_columns():
    """The source's rows with the sink's columns selected, as a pipeline queue A -> queue B."""
    from pyspark.sql.types import StructType

    keep = ("value", "headers", "queue")
    return StructType([f for f in SOURCE_SCHEMA.fields if f.name in keep])


def test_option_queue_with_a_queue_column_is_refused_naming_both_ways_out() -> None:
    layout = check_input_schema(_passed_through_source_columns())
    assert layout.queue is not None
    with pytest.raises(ConfigError) as err:
        sink_options({"queue": "b"}, streaming=True, queue_column=layout.queue is not None)
    text = str(err.value)
    assert "'b'" in text and "drop('queue')" in text and "routeByColumn=true" in text


def test_route_by_column_keeps_the_option_for_null_rows() -> None:
    opts = sink_options({"queue": "b", "routeByColumn": "TRUE"}, streaming=True, queue_column=True)
    assert opts.default_queue == "b"


@pytest.mark.parametrize(
    ("options", "queue_column", "default"),
    [
        pytest.param({"queue": "b"}, False, "b", id="option-only"),
        pytest.param({}, True, None, id="column-only"),
        pytest.param({"routeByColumn": "false"}, True, None, id="column-only-explicit"),
    ],
)
def test_one_of_option_and_column_needs_no_flag(options, queue_column, default) -> None:
    assert sink_options(options, queue_column=queue_column).default_queue == default


def test_route_by_column_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="routeByColumn"):
        sink_options({"queue": "b", "routeByColumn": "maybe"}, queue_column=True)
