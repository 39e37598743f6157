"""The connector and the repair job from Spark Connect clients (``sc://``).

One Spark Connect server for the module, started from the pip PySpark by
``cassieq_dev.local_connect`` (as ``make spark-connect-up`` does), its Python workers on this
venv, where cassieq-spark is installed. The clients run in processes of their own: a Connect
session turns its whole process into Connect mode, so a classic session of the same pytest
process could not start afterwards (and the reverse).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from support.queues import connection_flags, drain
from support.repair import TIMEOUT, assert_each_once, late_writes

from cassieq_dev.local_connect import LocalConnect

pytestmark = pytest.mark.sparkconnect

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent / "spark_connect_jobs"
PORT = 15102  # not the default 15002: a developer's own server may run there
CLIENT_TIMEOUT = 600
ROWS = 400


@pytest.fixture(scope="module")
def connect_server() -> LocalConnect:
    server = LocalConnect(
        port=PORT, base_dir=ROOT / ".spark" / "test-connect", python=sys.executable
    )
    with server:
        yield server


def _client_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CASSIEQ_", "SPARK_REMOTE", "SPARK_CONNECT"))
    }


def _run_client(script: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        env=_client_env(),
        timeout=CLIENT_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    return json.loads(line.removeprefix("REPORT "))


def test_round_trip_over_connect_delivers_each_row_once_and_acks_it(
    connect_server, cassieq_options, queue_client, tmp_path
):
    """Sink -> queue -> source (AvailableNow, two batches, acked on commit) from an sc://
    session; the batch read sees every row; the client-side lag listener gets each trigger."""
    queue = f"t_{uuid.uuid4().hex[:12]}"
    queue_client.create_queue(queue)
    options = {**cassieq_options, "queue": queue, "rows": str(ROWS)}
    report = _run_client(
        JOBS / "roundtrip.py", connect_server.url, str(tmp_path), json.dumps(options)
    )

    counts = Counter(int(v) for v in report["values"])
    assert set(counts) == set(range(ROWS)), "every row the sink wrote is delivered"
    assert max(counts.values()) == 1, "exactly once through sink -> queue -> source"
    assert report["headers_match"], "headers travel with their rows"
    assert sorted(int(v) for v in report["batch_values"]) == list(range(ROWS))
    stats = queue_client.stats(queue)
    assert (stats["enqueued"], stats["acked"], stats["backlog"], stats["in_flight"]) == (
        ROWS,
        ROWS,
        0,
        0,
    )
    lags = report["lag"]
    assert len(lags) >= 2, lags  # maxMessagesPerTrigger split the run
    assert lags[0][1] > 0 and lags[-1][1] == 0, lags
    queue_client.delete_queue(queue)


def test_connector_errors_over_connect_are_one_line(
    connect_server, cassieq_options, queue_client, tmp_path
):
    """With register(spark, short_errors=True): Spark's prefix and our line, no Python
    traceback and no JVM stack trace. Over Connect, load() sends nothing: the error of a bad
    option comes at the first action (collect, save) or at start()."""
    queue = f"t_{uuid.uuid4().hex[:12]}"
    queue_client.create_queue(queue)
    options = {**cassieq_options, "queue": queue}
    seen = _run_client(JOBS / "errors.py", connect_server.url, str(tmp_path), json.dumps(options))

    expected = {
        "batch read, bad port": "option 'port' must be an integer, got 'abc'",
        "batch write, misspelt option": "unknown option 'writertyp' for the cassieq sink (did "
        "you mean 'writerType'?)",
        "stream start, bad port": "option 'port' must be an integer, got 'abc'",
    }
    for case, line in expected.items():
        kind, message = seen[case]
        assert kind == "AnalysisException", (case, kind, message)
        first = message.splitlines()[0]
        assert "PYTHON_DATA_SOURCE_ERROR" in first and line in first, (case, message)
        assert "Traceback" not in message and "JVM stacktrace" not in message, (case, message)
    # What Connect refuses: anything that needs the SparkContext (the repair job no longer does).
    kind, message = seen["sparkContext"]
    assert "JVM_ATTRIBUTE_NOT_SUPPORTED" in message, seen["sparkContext"]
    assert queue_client.stats(queue)["enqueued"] == 0
    queue_client.delete_queue(queue)


def _repair(url: str, cassieq_options: dict, queue: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cassieq_spark.spark.repair_command",
            *connection_flags(cassieq_options),
            "--queue",
            queue,
            "--remote",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_client_env(),
    )


def test_two_repairs_over_connect_republish_each_late_write_once(
    connect_server, cassieq_options, queue_client
):
    """Two ``cassieq-repair --remote sc://...`` at once (DataFrames only, no SparkContext):
    every late write is republished, each exactly once, and counted by one of them."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    queue_client.create_queue(name, bucket_size=10, repair_timeout=TIMEOUT)
    queue = queue_client.get_queue(name)
    payloads = late_writes(queue_client, queue, 12)
    jobs = [_repair(connect_server.url, cassieq_options, name) for _ in range(2)]
    results = [job.communicate(timeout=CLIENT_TIMEOUT) for job in jobs]
    for job, (_out, err) in zip(jobs, results, strict=True):
        assert job.returncode == 0, err[-4000:]
    reports = [
        [json.loads(x) for x in out.splitlines() if x.startswith("{")][-1] for out, _ in results
    ]
    assert all(r["queue"] == name for r in reports)
    assert sum(r["republished"] for r in reports) == len(payloads), reports
    assert_each_once(queue_client, queue, payloads)
    assert queue_client.stats(name)["republished"] == len(payloads)
    queue_client.delete_queue(name)


def test_a_write_id_over_connect_writes_equal_rows_of_consecutive_batches(
    connect_server, cassieq_options, queue_client, tmp_path
):
    """foreachBatch over Connect, ``df.write`` with a constant ``writeId``, two batches of equal
    rows in a row: with the batch named (options batchId, queryCheckpoint) every batch's rows
    are written; with the writeId alone the write is refused (over Connect the sink cannot see
    the batch), and the failed batch is not acked."""
    names = {case: [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)] for case in ("scoped", "bare")}
    for src, dst in names.values():
        queue_client.create_queue(src)
        queue_client.create_queue(dst)
        queue_client.put_many(src, ["same-a", "same-b"] * 3)
    options = {**cassieq_options, "queues": names}
    report = _run_client(
        JOBS / "foreach_batch_write.py", connect_server.url, str(tmp_path), json.dumps(options)
    )

    src, dst = names["scoped"]
    assert report["scoped"] is None, report["scoped"]
    assert drain(queue_client, dst) == Counter({"same-a": 3, "same-b": 3})
    assert queue_client.stats(src)["backlog"] == 0

    src, dst = names["bare"]
    assert report["bare"] is not None and "batchId" in report["bare"], report["bare"]
    assert "queryCheckpoint" in report["bare"], report["bare"]
    assert drain(queue_client, dst) == Counter()
    assert queue_client.stats(src)["backlog"] == 6, "the refused batch is not acked"
    for pair in names.values():
        for name in pair:
            queue_client.delete_queue(name)
