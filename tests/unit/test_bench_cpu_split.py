"""The benchmarks' CPU split (``bench/cpu_split.py``): which process a CPU second is charged to,
and that a run's own work is seen."""

from __future__ import annotations

import time

import pytest

from bench.cpu_split import CpuSplit, kind_of

pytestmark = [pytest.mark.unit, pytest.mark.fast]

ROOT = "/work/checkout"
NODE = f"/usr/bin/java\0-cp\0{ROOT}/.cassandra/lib/*\0org.apache.cassandra.service.CassandraDaemon"


def test_this_checkouts_node_is_cassandra_another_checkouts_is_other():
    assert kind_of(NODE, mine=False, root=ROOT) == "cassandra"
    assert kind_of(NODE.replace(ROOT, "/elsewhere"), mine=False, root=ROOT) == "other"


def test_spark_processes_count_only_under_the_bench_process():
    jvm = "/usr/lib/jvm/bin/java\0-cp\0spark/jars/*\0org.apache.spark.deploy.SparkSubmit"
    worker = "/venv/bin/python\0-m\0pyspark.daemon\0pyspark.worker"
    assert kind_of(jvm, mine=True, root=ROOT) == "spark_jvm"
    assert kind_of(worker, mine=True, root=ROOT) == "python_worker"
    runner = "/venv/bin/python\0-m\0pyspark.sql.streaming.python_streaming_source_runner"
    assert kind_of(runner, mine=True, root=ROOT) == "source_runner"
    assert kind_of(jvm, mine=False, root=ROOT) == "other"
    assert kind_of(worker, mine=False, root=ROOT) == "other"
    assert kind_of("/venv/bin/python\0-m\0bench.run", mine=True, root=ROOT) == "bench"


def test_a_busy_loop_is_charged_to_the_bench_process():
    with CpuSplit() as split:
        deadline = time.process_time() + 0.3
        while time.process_time() < deadline:
            pass
    assert split.seconds["bench"] >= 0.25
    per = split.per_message_us(1000)
    assert per["bench"] >= 250.0
    assert 0.0 <= per["idle_share"] <= 1.0
