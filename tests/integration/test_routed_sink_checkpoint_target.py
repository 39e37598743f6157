"""A streaming sink whose rows name their queues (no option ``queue``) records its target in the
checkpoint too: a restart pointed at another keyspace or cluster is refused.

The replay of the last uncommitted micro-batch finds its blocks by key only where the first
attempt wrote them; elsewhere it writes the batch again (F28). The record used to be written
for option ``queue`` only, so a routed-only sink moved between keyspaces unchecked (protocol
review 2, G12). Real Cassandra (two keyspaces); the sink planned as Spark's driver plans it.
"""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark import sink_target
from cassieq_spark.spark.sink import plan_sink

pytestmark = [pytest.mark.integration]

ROUTED = StructType([StructField("value", StringType()), StructField("queue", StringType())])


def test_a_routed_sink_restarted_on_another_keyspace_is_refused(
    cassieq_options, queue_client, own_keyspace_client, tmp_path
):
    ckpt = str(tmp_path / "ckpt")
    first = {**cassieq_options, "checkpointLocation": ckpt}
    plan_sink(first, ROUTED, overwrite=False, streaming=True)
    assert (tmp_path / "ckpt" / sink_target.FILE_NAME).exists()
    sink_target.forget_checked()  # as a new driver process would
    plan_sink(first, ROUTED, overwrite=False, streaming=True)  # same target: fine

    other = {**first, "keyspace": own_keyspace_client.config.keyspace}
    with pytest.raises(ConfigError) as err:
        plan_sink(other, ROUTED, overwrite=False, streaming=True)
    for fragment in (repr(cassieq_options["keyspace"]), repr(other["keyspace"]), "rows name"):
        assert fragment in str(err.value), str(err.value)
    plan_sink({**other, "allowTargetChange": "true"}, ROUTED, overwrite=False, streaming=True)
    sink_target.forget_checked()
    plan_sink(other, ROUTED, overwrite=False, streaming=True)  # the new target is recorded
