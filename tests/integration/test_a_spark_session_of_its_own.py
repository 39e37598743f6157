"""What needs a Spark session of its own, in a new Python process: ``format("cassieq")`` without
``register(spark)`` (PySpark 4 finds the ``pyspark_cassieq`` package by itself; nothing of this
project may be imported before), and real task retries (``local[2,3]``: up to 3 attempts per
task, which the tests' shared ``local[2]`` session does not make).

Starting Spark is the dearest step, so one process runs both scenarios, one after the other
(the first before anything imports the package), and reports each; each test checks its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from support.sink import TIMEOUT, stored_rows, write_text_files

from cassieq_spark.engine.core import monoton

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import json, sys, traceback
    from pathlib import Path
    from pyspark import TaskContext
    from pyspark.sql import SparkSession, functions as F

    args = json.loads(sys.argv[1])
    spark = (
        SparkSession.builder.master("local[2,3]")  # up to 3 attempts per task
        .appName("a-session-of-its-own")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # small Arrow batches: the writer gets (and writes) rows before the failing row
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ours = lambda: sorted(
        m for m in sys.modules if m.startswith(("cassieq_spark", "pyspark_cassieq"))
    )

    # 1. format("cassieq") in a session where nothing registered the source. A failure here
    # is reported, and the second scenario runs all the same.
    opts, ckpt = args["auto"]["options"], args["auto"]["checkpoint"]
    before = ours()
    try:
        spark.createDataFrame([("a",), ("b",), ("c",)], "value string").write.format(
            "cassieq"
        ).options(**opts).mode("append").save()
        text = lambda rows: sorted(bytes(r.value).decode() for r in rows)
        batch = text(spark.read.format("cassieq").options(**opts).load().collect())
        stream = (
            spark.readStream.format("cassieq").options(**opts).load()
            .writeStream.format("memory").queryName("got")
            .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
        )
        stream.awaitTermination(120)
        streamed = text(spark.sql("select value from got").collect())
        auto = {"before": before, "batch": batch, "stream": streamed, "imported": ours()}
    except Exception:
        auto = {"error": traceback.format_exc()[-3000:]}
    print(json.dumps({"auto": auto}), flush=True)

    # 2. Task retries: a streaming write and a batch write whose task fails once.
    from cassieq_spark.spark import register

    register(spark)
    options, queue, src, ckpt, marker_dir = args["retry"]

    def fail_once(batches):
        # A task that fails on its first attempt when it reaches row "...-line300", after the
        # rows before it went down the pipeline to the writer.
        ctx = TaskContext.get()
        for batch in batches:
            for start in range(0, batch.num_rows, 50):
                part = batch.slice(start, 50)
                if ctx.attemptNumber() == 0:
                    hit = [v for v in part.column(0).to_pylist() if v.endswith("-line300")]
                    if hit:
                        Path(marker_dir, f"failed-{hit[0]}").touch()
                        raise RuntimeError("injected failure after 300 rows")
                yield part

    df = spark.readStream.format("text").load(src).mapInArrow(fail_once, "value string")
    q = (
        df.writeStream.format("cassieq").options(**options).option("queue", queue)
        .option("idBlockSize", "64").option("checkpointLocation", ckpt)
        .trigger(availableNow=True).start()
    )
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    batch = spark.range(0, 500, numPartitions=1).select(
        F.format_string("batch-line%d", "id").alias("value")
    ).mapInArrow(fail_once, "value string")
    batch.write.format("cassieq").options(**options).option("queue", queue).option(
        "idBlockSize", "64"
    ).mode("append").save()
    print(json.dumps({"retry": "done"}), flush=True)
    spark.stop()
    """
)

RETRY_LINES = [f"s-line{i}" for i in range(500)]


@pytest.fixture(scope="module")
def session_run(cassieq_options, queue_client, tmp_path_factory):
    """Runs the script once for the module: the queues it used, its directory, its report."""
    tmp = tmp_path_factory.mktemp("own-session")
    auto_queue, retry_queue = (f"t_{uuid.uuid4().hex[:12]}" for _ in range(2))
    queue_client.create_queue(auto_queue)
    queue_client.create_queue(retry_queue, bucket_size=100)
    src, markers = tmp / "in", tmp / "markers"
    markers.mkdir()
    write_text_files(src, {"f.txt": RETRY_LINES})
    args = {
        "auto": {
            "options": {**cassieq_options, "queue": auto_queue},
            "checkpoint": str(tmp / "auto-ckpt"),
        },
        "retry": [cassieq_options, retry_queue, str(src), str(tmp / "ckpt"), str(markers)],
    }
    # As in an activated virtualenv: Spark's JVM runs the source lookup and its Python workers
    # with PYSPARK_PYTHON, else with the `python3` on PATH, which must be an interpreter that
    # has this package installed. The working directory is not the checkout, so nothing of it
    # is importable by accident.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONSTARTUP"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        env=env,
        cwd=tmp,
    )
    report: dict = {}  # a line per scenario: {"auto": ...}, then {"retry": "done"}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            report.update(json.loads(line))
    return {
        "auto_queue": auto_queue,
        "retry_queue": retry_queue,
        "markers": markers,
        "report": report,
        "returncode": proc.returncode,
        "stderr": proc.stderr[-4000:],
    }


def test_format_cassieq_works_in_a_fresh_session_without_register(
    session_run, queue_client
) -> None:
    auto = session_run["report"].get("auto")
    assert auto is not None, session_run["stderr"]
    assert "error" not in auto, auto.get("error")
    assert auto["before"] == []  # a session of its own: nothing of the package imported yet
    assert auto["batch"] == ["a", "b", "c"]
    assert auto["stream"] == ["a", "b", "c"]
    assert auto["imported"] == []  # the driver process never imported the package itself
    # The stream acked what it read (its lease keeps client consumers away, so ask the stats).
    stats = queue_client.stats(session_run["auto_queue"])
    assert (stats["backlog"], stats["in_flight"]) == (0, 0), stats


def test_retried_tasks_add_nothing_twice(session_run, queue_client) -> None:
    # Real Spark task retries (local[2,3]). Observed here: the first attempt fails before the
    # writer's Python worker has taken any row, so this proves the retry path end to end; the
    # half-written cases are covered by test_null_value_in_stream_rolls_back_written_chunks
    # (rollback) and test_task_after_crashed_attempt_rewrites_same_ids (open block rewritten).
    assert session_run["returncode"] == 0, session_run["stderr"]
    assert session_run["report"].get("retry") == "done", session_run["stderr"]
    # both the streaming task and the batch task failed once, after 300 rows
    assert sorted(p.name for p in Path(session_run["markers"]).glob("failed-*")) == [
        "failed-batch-line300",
        "failed-s-line300",
    ]
    queue_name = session_run["retry_queue"]
    expected = RETRY_LINES + [f"batch-line{i}" for i in range(500)]
    live = stored_rows(queue_client, queue_name)
    assert len({r.id for r in live}) == len(live)
    assert sorted(bytes(r.payload).decode() for r in live) == sorted(expected)
    info = queue_client.get_queue(queue_name)
    assert monoton.horizon(queue_client.conn, info, 0).open_count == 0
