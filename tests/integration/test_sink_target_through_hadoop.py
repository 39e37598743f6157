"""The sink's target check through Spark's own file system API: with a Spark JVM in the
process, the record under a ``file:`` checkpoint is written and read by Hadoop's local file
system (its checksum file beside it shows which API wrote it), and a restart pointed at another
queue is refused as on any other file system. Real local Spark; no Cassandra needed."""

from __future__ import annotations

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark import sink_target
from cassieq_spark.spark.sink_target import FILE_NAME, Target, check_target, spark_jvm

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_file_checkpoint_keeps_the_target_check_through_hadoop(spark, tmp_path):
    assert spark_jvm() is not None
    ckpt = f"file://{tmp_path}/ckpt"
    first = Target("c1", "ks", "orders", "11111111-1111-1111-1111-111111111111")
    check_target(ckpt, first, allow_change=False)
    assert (tmp_path / "ckpt" / FILE_NAME).exists()
    assert (tmp_path / "ckpt" / f".{FILE_NAME}.crc").exists()  # Hadoop's ChecksumFs wrote it
    sink_target.forget_checked()  # as a new driver process would
    check_target(ckpt, first, allow_change=False)  # same target: fine

    other = Target("c1", "ks", "audit", "22222222-2222-2222-2222-222222222222")
    with pytest.raises(ConfigError) as err:
        check_target(ckpt, other, allow_change=False)
    assert "'orders'" in str(err.value) and "'audit'" in str(err.value)
    check_target(ckpt, other, allow_change=True)  # recorded through Hadoop: rename over
    sink_target.forget_checked()
    check_target(ckpt, other, allow_change=False)
    with pytest.raises(ConfigError):
        sink_target.forget_checked()
        check_target(ckpt, first, allow_change=False)
