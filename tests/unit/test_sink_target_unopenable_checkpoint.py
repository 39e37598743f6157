"""A sink checkpoint on a file system the planning process cannot open (no Spark JVM there, a
scheme pyarrow does not know: ``wasbs://``, ``dbfs:/``, ``s3a://`` in a Python worker) is
refused with an error that names the scheme, instead of running without the target check;
``allowTargetChange=true`` runs without it, with a warning that names the scheme."""

from __future__ import annotations

import logging

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark import sink_target
from cassieq_spark.spark.sink_target import FILE_NAME, Target, check_target, qualified

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


def test_a_path_without_a_scheme_is_on_sparks_default_file_system(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark puts a scheme-less checkpointLocation on fs.defaultFS (HDFS on YARN): the record
    goes there too, or the path is refused naming that file system; never a local file that a
    resubmitted driver on another machine would not find."""
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    (conf / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name>"
        "<value>hdfs://namenode.invalid:8020</value></property></configuration>"
    )
    # as in the Python worker that plans a running query's sink: no Spark JVM to ask
    monkeypatch.setattr(sink_target, "spark_jvm", lambda: None)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert qualified("/ck/orders") == "hdfs://namenode.invalid:8020/ck/orders"
    assert qualified("file:/ck/orders") == "file:/ck/orders"
    with pytest.raises(ConfigError) as err:
        check_target("ck/orders", TARGET, allow_change=False)
    text = str(err.value)
    assert "hdfs://namenode.invalid:8020/user/" in text and "fs.defaultFS" in text, text
    assert not (tmp_path / "ck").exists(), "nothing written to the local disk"


def test_a_path_without_a_scheme_stays_local_when_the_default_file_system_is(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.hadoop.fs.defaultFS  file:///\n")
    monkeypatch.setattr(sink_target, "spark_jvm", lambda: None)
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    assert qualified(str(tmp_path / "ck")) == str(tmp_path / "ck")
    check_target(str(tmp_path / "ck"), TARGET, allow_change=False)
    assert (tmp_path / "ck" / FILE_NAME).exists()
