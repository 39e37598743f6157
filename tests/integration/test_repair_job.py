"""The repair job on the real Cassandra and a real local Spark.

Most tests run the distributed pass in-process on the session's Spark (``run_pass``); the
concurrency, crash and command-line tests run the real ``jobs/repair.py`` as subprocesses (each
starts a Spark of its own, the dearest step here: a rerun after a crash runs in-process, and
one looping job checks the environment fallbacks, the per-queue lines and the loop at once).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.queues import connection_flags
from support.repair import TIMEOUT
from support.repair import assert_each_once as _assert_each_once
from support.repair import drain_republished as _drain
from support.repair import late_writes as _late_writes
from support.repair import skip_blocks as _skip_blocks

from cassieq_spark.config import connection_from_options
from cassieq_spark.engine.consume.consumer import HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE
from cassieq_spark.engine.core import monoton, pointers
from cassieq_spark.engine.core.messages import write_messages
from cassieq_spark.engine.upkeep import repair
from cassieq_spark.spark.repair_job import RepairSettings, run_pass

JOB = Path(__file__).resolve().parents[2] / "jobs" / "repair.py"
BUCKET = 10


@pytest.fixture
def queue(queue_client, queue_name):
    queue_client.create_queue(queue_name, bucket_size=BUCKET, repair_timeout=TIMEOUT)
    info = queue_client.get_queue(queue_name)
    yield info
    queue_client.delete_queue(queue_name)


@pytest.fixture
def config(cassieq_options):
    return connection_from_options(cassieq_options)


def _job_args(cassieq_options) -> list[str]:
    return connection_flags(cassieq_options)


def _job_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    for k in [k for k in env if k.startswith("CASSIEQ_") and k != "CASSIEQ_TEST_CASSANDRA"]:
        del env[k]
    return env


def _start_job(cassieq_options, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The job on the test keyspace: through its connection flags, or (``env`` given) through
    the ``CASSIEQ_*`` variables of ``env`` alone."""
    flags = _job_args(cassieq_options) if env is None else []
    return subprocess.Popen(
        [sys.executable, str(JOB), *flags, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_job_env() if env is None else env,
        start_new_session=True,  # its own process group: the Spark JVM and workers die with it
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _reports(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _skipped_rows(client, queue) -> list:
    return list(
        client.conn.execute(
            "SELECT lo, hi, done, republished, lost FROM {ks}.skipped WHERE queue_id = ?",
            (queue.queue_id,),
        )
    )


def _partition_size(client, queue, bucket: int) -> int:
    row = client.conn.execute(
        "SELECT count(*) AS n FROM {ks}.messages WHERE queue_id = ? AND bucket = ?",
        (queue.queue_id, bucket),
    ).one()
    return row.n


def _consume_all(client, queue_name: str) -> None:
    while (msg := client.get(queue_name)) is not None:
        assert client.ack(queue_name, msg.pop_receipt)


# -- end to end ---------------------------------------------------------------------------------


@pytest.mark.fast  # the smoke tests of make test-fast
def test_late_write_into_passed_range_is_delivered_once_with_origin(
    spark, queue_client, queue, config
):
    [late] = _skip_blocks(queue_client, queue, 1)
    # The "dead" writer was only slow: its message lands after readers passed its block.
    write_messages(queue_client.conn, queue, late.lo, [b"late payload"], [{"trace": "t-1"}])
    monoton.close(queue_client.conn, queue, late).result()
    assert queue_client.get(queue.name) is None, "readers must not deliver a skipped range"
    time.sleep(TIMEOUT + 0.2)

    [report] = run_pass(spark, config, [queue.name], RepairSettings())

    assert report.republished == 1
    assert report.lost_reservations == 0
    got = _drain(queue_client, queue.name)
    assert [m.payload for m in got] == [b"late payload"]
    (msg,) = got
    assert msg.id != late.lo
    assert msg.headers["trace"] == "t-1"
    assert msg.headers[HEADER_ORIGIN_ID] == str(late.lo)
    assert msg.headers[HEADER_ORIGIN_QUEUE] == queue.name
    [row] = _skipped_rows(queue_client, queue)
    assert (row.lo, row.done, row.republished, row.lost) == (late.lo, True, 1, 0)
    assert queue_client.stats(queue.name)["republished"] == 1
    # A second pass repeats nothing.
    [again] = run_pass(spark, config, [queue.name], RepairSettings())
    assert again.republished == 0
    assert _drain(queue_client, queue.name) == []


def _stream_once(spark, options: dict, checkpoint) -> list:
    """Run an AvailableNow query of the cassieq source; the rows it delivered."""
    rows: list = []
    reader = spark.readStream.format("cassieq")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda df, _batch: rows.extend(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    return rows


def test_streaming_source_gets_a_late_write_after_the_repair_job(
    spark, queue_client, queue, config, cassieq_options, tmp_path
):
    from cassieq_spark.spark import register

    register(spark)
    opts = {**cassieq_options, "queue": queue.name, "consumerId": "repair-e2e"}
    late = monoton.reserve(queue_client.conn, queue, 1)
    ids = queue_client.put_many(queue.name, [f"m{i}".encode() for i in range(5)])
    time.sleep(TIMEOUT + 0.3)
    first = _stream_once(spark, opts, tmp_path / "ck")
    assert sorted(r.id for r in first) == ids  # passed the abandoned block
    assert pointers.read(queue_client.conn, queue).reader == ids[-1] + 1  # ... and committed
    write_messages(queue_client.conn, queue, late.lo, [b"late"], [{"trace": "t-2"}])
    monoton.close(queue_client.conn, queue, late).result()
    time.sleep(TIMEOUT + 0.2)
    assert _stream_once(spark, opts, tmp_path / "ck") == []  # the source does not go back

    [report] = run_pass(spark, config, [queue.name], RepairSettings())
    assert report.republished == 1

    second = _stream_once(spark, opts, tmp_path / "ck")
    assert [(r.value, r.headers["trace"]) for r in second] == [(b"late", "t-2")]
    assert second[0].headers[HEADER_ORIGIN_ID] == str(late.lo)
    assert second[0].id > ids[-1]
    assert _stream_once(spark, opts, tmp_path / "ck") == []  # delivered once


def test_reservation_never_written_is_lost_and_blocks_nothing(spark, queue_client, queue, config):
    _skip_blocks(queue_client, queue, 1, ids_per_block=3)  # ids 0..2 never written
    queue_client.put_many(queue.name, [f"m{i}".encode() for i in range(20)])
    _consume_all(queue_client, queue.name)
    reader = pointers.read(queue_client.conn, queue).reader
    assert reader == 24  # 3 lost + marker + 20
    time.sleep(TIMEOUT + 0.2)

    [report] = run_pass(spark, config, [queue.name], RepairSettings())

    assert report.lost_reservations == 1
    assert report.lost_ids == 3
    assert report.republished == 0
    assert report.buckets_reclaimed == 2  # buckets 0 and 1; bucket 2 is not wholly behind
    assert report.repair_pointer == 2
    assert pointers.read(queue_client.conn, queue).repair == 2
    stats = queue_client.stats(queue.name)
    assert (stats["lost"], stats["enqueued"], stats["acked"]) == (3, 21, 21)
    assert queue_client.put(queue.name, b"after") == 24
    assert queue_client.get(queue.name).payload == b"after"


def test_reclaimed_buckets_are_gone_and_stats_stay_correct(spark, queue_client, queue, config):
    ids = queue_client.put_many(queue.name, [f"m{i}".encode() for i in range(50)])
    held = None
    for i in range(36):
        if i == 35:
            time.sleep(0.6)  # readers move the pointer at most every 0.5 s under load
        msg = queue_client.get(queue.name, visibility_timeout=300)
        assert msg.id == ids[i]
        if msg.id == 14:
            held = msg  # in flight in bucket 1: holds the repair pointer at bucket 1
        else:
            assert queue_client.ack(queue.name, msg.pop_receipt)
    before = queue_client.stats(queue.name)

    [first] = run_pass(spark, config, [queue.name], RepairSettings())
    assert (first.buckets_reclaimed, first.repair_pointer) == (1, 1)
    assert _partition_size(queue_client, queue, 0) == 0
    assert _partition_size(queue_client, queue, 1) == BUCKET
    now = queue_client.stats(queue.name)
    for key in (
        "enqueued",
        "acked",
        "backlog",
        "in_flight",
        "delayed",
        "next_id",
        "reader_pointer",
    ):
        assert now[key] == before[key], key
    assert (before["repair_pointer"], now["repair_pointer"]) == (0, 1)

    assert queue_client.ack(queue.name, held.pop_receipt)
    [second] = run_pass(spark, config, [queue.name], RepairSettings())
    assert (second.buckets_reclaimed, second.repair_pointer) == (2, 3)
    assert [_partition_size(queue_client, queue, b) for b in range(5)] == [0, 0, 0, 10, 10]
    after = queue_client.stats(queue.name)
    assert after["acked"] == 36 and after["enqueued"] == 50
    assert (after["backlog"], after["in_flight"], after["repair_pointer"]) == (14, 0, 3)
    # What is left is still delivered, in order.
    assert [m.id for m in _drain(queue_client, queue.name)] == ids[36:]


def test_pointer_moves_forward_only_and_drops_are_idempotent(spark, queue_client, queue, config):
    queue_client.put_many(queue.name, [b"x"] * 30)
    _consume_all(queue_client, queue.name)
    stale = pointers.read(queue_client.conn, queue)  # a slow second job's view: repair = 0
    [report] = run_pass(spark, config, [queue.name], RepairSettings())
    assert report.repair_pointer == 3
    # The slow job finishes its pass with its old view: drops again, pointer stays put.
    late_report = repair.RepairReport(queue=queue.name)
    repair.finish_pass(queue_client.conn, queue, stale, {0: True, 1: True}, late_report)
    assert pointers.read(queue_client.conn, queue).repair == 3
    assert late_report.repair_pointer == 3
    assert not pointers.advance(queue_client.conn, queue, "repair", 1)


def test_dry_run_changes_nothing(spark, queue_client, queue, config):
    [late] = _skip_blocks(queue_client, queue, 1)
    write_messages(queue_client.conn, queue, late.lo, [b"late"])
    queue_client.put_many(queue.name, [b"x"] * 20)
    _consume_all(queue_client, queue.name)
    time.sleep(TIMEOUT + 0.2)
    conn = queue_client.conn

    def snapshot():
        return (
            [tuple(r) for r in _skipped_rows(queue_client, queue)],
            pointers.read(conn, queue),
            [_partition_size(queue_client, queue, b) for b in range(3)],
            queue_client.stats(queue.name),
            conn.execute(
                "SELECT count(*) AS n FROM {ks}.reservation_keys WHERE queue_id = ? "
                "AND key = ? ALLOW FILTERING",
                (queue.queue_id, f"repair:{late.lo}#0"),
            )
            .one()
            .n,
        )

    before = snapshot()
    # In-process on the session's Spark (the command line's --dry-run is this setting:
    # tests/unit/test_repair_command_arguments.py).
    [result] = run_pass(spark, config, [queue.name], RepairSettings(dry_run=True))
    report = result.as_dict()
    assert report["queue"] == queue.name and report["dry_run"] is True
    assert report["republished"] == 1  # what a real pass would do
    assert report["buckets_reclaimed"] == 2
    assert report["repair_pointer"] == 0  # ... but did not
    after = snapshot()
    assert after == before
    assert _drain(queue_client, queue.name) == []  # nothing was republished


# -- concurrency and crashes (the real job, as subprocesses) -------------------------------------


def test_two_jobs_at_once_republish_each_message_once(queue_client, queue, cassieq_options):
    payloads = _late_writes(queue_client, queue, 8)
    jobs = [_start_job(cassieq_options, "--queue", queue.name) for _ in range(2)]
    results = [_finish(j) for j in jobs]
    for rc, _out, err in results:
        assert rc == 0, err
    reports = [_reports(out)[-1] for _rc, out, _err in results]
    # Each range is counted by exactly one of the jobs.
    assert sum(r["republished"] for r in reports) == len(payloads)
    assert all(r["queue"] == queue.name for r in reports)
    _assert_each_once(queue_client, queue, payloads)
    assert queue_client.stats(queue.name)["republished"] == len(payloads)


def test_job_killed_mid_run_and_rerun_loses_and_duplicates_nothing(
    spark, queue_client, queue, config, cassieq_options
):
    n = 60
    payloads = _late_writes(queue_client, queue, n)
    kill_after = random.randint(1, n // 2)
    job = _start_job(cassieq_options, "--queue", queue.name)
    done_at_kill = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and job.poll() is None:
        done = sum(1 for r in _skipped_rows(queue_client, queue) if r.done)
        if done >= kill_after:
            os.killpg(job.pid, signal.SIGKILL)
            done_at_kill = done
            break
        time.sleep(0.05)
    job.wait(timeout=60)
    assert done_at_kill is not None and done_at_kill < n, "the kill should land mid-run"
    # Rerun until nothing is pending: copies whose blocks the killed job left open are
    # themselves repaired a repair timeout later. The rerun is the job's pass in this process
    # (a pass keeps no state between runs; the killed job's process is gone either way).
    for _ in range(4):
        [report] = run_pass(spark, config, [queue.name], RepairSettings())
        if report.pending_ranges == 0:
            break
        time.sleep(TIMEOUT + 0.2)
    assert all(r.done for r in _skipped_rows(queue_client, queue))
    _assert_each_once(queue_client, queue, payloads)


# -- the command line -------------------------------------------------------------------------


def _run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(JOB), *args],
        capture_output=True,
        text=True,
        env=_job_env(),
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "status", "needle"),
    [
        ([], 2, "--queue"),
        (["--queue", "a", "--all-queues"], 2, "not allowed with"),
        (["--queue", "a", "--repair-timeout", "soon"], 2, "--repair-timeout"),
        (["--queue", "a", "--interval", "-1"], 2, "--interval"),
        (["--queue", "bad name!"], 2, "invalid queue name"),
        (["--queue", "a", "--port", "1", "--contact-points", "127.0.0.1"], 1, "cannot reach"),
        (["--queue", "a", "--port", "99999"], 2, "port"),
    ],
)
def test_bad_arguments_give_one_clear_line(args, status, needle):
    proc = _run_cli(*args)
    assert proc.returncode == status, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_unknown_queue_is_reported(cassieq_options, queue_name):
    proc = _run_cli(*_job_args(cassieq_options), "--queue", queue_name)
    assert proc.returncode == 4
    assert f"queue {queue_name!r} does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_environment_fallbacks_one_line_per_queue_and_pass_until_terminated(
    queue_client, queue, cassieq_options
):
    """The job with no connection flags (the ``CASSIEQ_*`` variables instead), two queues and
    ``--loop``: one line per queue and pass, in the order named, until SIGTERM ends it."""
    env = _job_env()
    env["CASSIEQ_CONTACT_POINTS"] = cassieq_options["contactPoints"]
    env["CASSIEQ_PORT"] = cassieq_options["port"]
    env["CASSIEQ_KEYSPACE"] = cassieq_options["keyspace"]
    other = f"{queue.name}_b"
    queue_client.create_queue(other, bucket_size=BUCKET, repair_timeout=TIMEOUT)
    try:
        job = _start_job(
            cassieq_options,
            *("--queue", queue.name, "--queue", other, "--loop", "--interval", "0.5"),
            env=env,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(lines) < 4 and job.poll() is None:
            time.sleep(0.2)
        job.send_signal(signal.SIGTERM)  # the driver only: it ends the loop and stops Spark
        job.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        queue_client.delete_queue(other)
    assert job.returncode == 0, job.stderr.read()
    reports = [json.loads(line) for line in lines]
    assert [(r["queue"], r["pass"]) for r in reports[:4]] == [
        (queue.name, 1),
        (other, 1),
        (queue.name, 2),
        (other, 2),
    ]
    for report in reports:
        for k in ("buckets_scanned", "republished", "lost_reservations", "buckets_reclaimed"):
            assert k in report
        assert "repair_pointer" in report


# -- a republisher that died holding its block ---------------------------------------------------


def _dead_republisher(client, queue):
    """A late message X whose republish block B was reserved by a repair that then died, and
    that readers have since passed (B is recorded as skipped)."""
    [x] = _skip_blocks(client, queue, 1)
    write_messages(client.conn, queue, x.lo, [b"late-x"])
    block = monoton.reserve_keyed(client.conn, queue, f"repair:{x.lo}#0", 1)
    _skip_blocks(client, queue, 0)  # readers pass B once it is older than the repair timeout
    assert {r.lo for r in _skipped_rows(client, queue)} == {x.lo, block.lo}
    return x, block


def test_rerun_after_a_dead_republisher_delivers_once(spark, queue_client, queue, config):
    x, block = _dead_republisher(queue_client, queue)
    # X's repair finds B open and old: it pushes B's repair back, then writes X's copy into B.
    [first] = run_pass(spark, config, [queue.name], RepairSettings())
    assert first.republished == 1 and first.pending_ranges == 1
    assert _drain(queue_client, queue.name) == []  # readers skip B: its repair delivers it
    time.sleep(TIMEOUT + 0.2)
    [second] = run_pass(spark, config, [queue.name], RepairSettings())
    assert second.republished == 1 and second.pending_ranges == 0
    got = _drain(queue_client, queue.name)
    assert [(m.payload, m.headers[HEADER_ORIGIN_ID]) for m in got] == [(b"late-x", str(x.lo))]
    assert got[0].id not in (x.lo, block.lo)


def test_republish_moves_on_when_its_block_was_repaired_without_it(
    spark, queue_client, queue, config
):
    x, block = _dead_republisher(queue_client, queue)
    [b_range] = [r for r in repair.skipped_ranges(queue_client.conn, queue) if r.lo == block.lo]
    assert repair.repair_range(queue_client.conn, queue_client.counters, queue, b_range) == (0, 1)
    [report] = run_pass(spark, config, [queue.name], RepairSettings())
    assert report.republished == 1 and report.pending_ranges == 0
    got = _drain(queue_client, queue.name)
    assert [(m.payload, m.headers[HEADER_ORIGIN_ID]) for m in got] == [(b"late-x", str(x.lo))]
    assert got[0].id not in (x.lo, block.lo)
    [again] = run_pass(spark, config, [queue.name], RepairSettings())
    assert again.republished == 0
    assert _drain(queue_client, queue.name) == []
