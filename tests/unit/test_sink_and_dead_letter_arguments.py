"""Arguments of the sink and of ``dead_letter(...)`` that used to be ignored, or to end in a raw
Python error, are refused in one line before anything connects or is read: allowTargetChange on
``df.write`` (it has no checkpoint), a reason column that is not a name, something else than a
DataFrame, option names the connection does not take (a typo sent the lookup to the default
keyspace; writeId/bucketSize were dropped without a word). A Column as reason_col and a string
id column need a DataFrame: tests/integration/test_bad_inputs_spark.py."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.dead_letter import dead_letter
from cassieq_spark.spark.sink import plan_sink

pytestmark = pytest.mark.unit

# Nothing listens on port 1: a check that came after connecting would fail on the connection.
CONN = {"contactPoints": "127.0.0.1", "port": "1", "keyspace": "badin2"}


def test_allow_target_change_is_refused_for_a_batch_write() -> None:
    """N342: allowTargetChange 'true' on df.write."""
    schema = StructType([StructField("value", StringType())])
    opts = {**CONN, "queue": "sk", "allowTargetChange": "true"}
    with pytest.raises(ConfigError, match="option 'allowTargetChange' is for df.writeStream"):
        plan_sink(opts, schema, overwrite=False, streaming=False)


@pytest.mark.parametrize(
    "row, args, kwargs, fragment",
    [
        ("N352", ("rows",), {"reason_col": None}, "reason_col must be the name of a column"),
        ("N352-empty", ("rows",), {"reason_col": ""}, "reason_col must be the name of a column"),
        ("N362", ("not a DataFrame",), {}, "dead_letter takes a DataFrame"),
        ("N359", ("rows",), {"keyspase": "badin2"}, "unknown option 'keyspase'"),
        ("N360", ("rows",), {"writeId": "x", "bucketSize": "abc"}, "unknown option 'bucketsize'"),
        ("N362-queue", ("rows",), {"queue": 5}, "queue must be a queue name"),
    ],
)
def test_dead_letter_arguments_are_checked_first(
    row: str, args: tuple, kwargs: dict, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        dead_letter(*args, **{**CONN, **kwargs})
    assert fragment in str(info.value) and "\n" not in str(info.value), str(info.value)
