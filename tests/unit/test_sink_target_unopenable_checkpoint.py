"""A sink checkpoint on a file system the planning process cannot open (no Spark JVM there, a
scheme pyarrow does not know: ``wasbs://``, ``dbfs:/``, ``s3a://`` in a Python worker) is
refused with an error that names the scheme, instead of running without the target check;
``allowTargetChange=true`` runs without it, with a warning that names the scheme."""

from __future__ import annotations

import logging

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.sink_target import Target, check_target

pytestmark = pytest.mark.unit

TARGET = Target("c1", "ks", "q", "11111111-1111-1111-1111-111111111111")


@pytest.mark.parametrize(
    "checkpoint, scheme",
    [("wasbs://box@acct.blob.core.windows.net/ck", "wasbs"), ("dbfs:/ck/orders", "dbfs")],
)
def test_an_unopenable_checkpoint_is_refused_naming_its_scheme(
    checkpoint: str, scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ConfigError) as err:
        check_target(checkpoint, TARGET, allow_change=False)
    text = str(err.value)
    assert f"scheme {scheme!r}" in text and "allowTargetChange=true" in text, text
    with caplog.at_level(logging.WARNING, logger="cassieq_spark.spark.sink_target"):
        check_target(checkpoint, TARGET, allow_change=True)
    assert any(repr(scheme) in r.getMessage() for r in caplog.records), caplog.text
