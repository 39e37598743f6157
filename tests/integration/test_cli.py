"""The `cassieq` command end to end, as a subprocess against the real Cassandra."""

from __future__ import annotations

import json

from cassieq_spark.cli import EXIT_EMPTY, EXIT_NOT_FOUND, EXIT_STALE


def test_round_trip(run, queue_name):
    r = run("create-queue", queue_name, "--visibility-timeout", "20", "--bucket-size", "50")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["bucket_size"] == 50
    assert queue_name in [q["name"] for q in json.loads(run("list-queues").stdout)]
    put = run("put", queue_name, "hello world")
    assert put.returncode == 0 and int(put.stdout) >= 0
    peek = json.loads(run("peek", queue_name).stdout)
    assert [m["payload"] for m in peek] == ["hello world"]
    got = run("get", queue_name)
    assert got.returncode == 0, got.stderr
    msg = json.loads(got.stdout)
    assert msg["id"] == int(put.stdout) and msg["payload"] == "hello world"
    assert msg["delivery_count"] == 1
    empty = run("get", queue_name, module=True)
    assert (empty.returncode, empty.stdout) == (EXIT_EMPTY, "")
    stats = json.loads(run("stats", queue_name).stdout)
    assert (stats["enqueued"], stats["in_flight"], stats["acked"]) == (1, 1, 0)
    ack = run("ack", queue_name, msg["pop_receipt"])
    assert ack.returncode == 0, ack.stderr
    stale = run("ack", queue_name, msg["pop_receipt"])
    assert stale.returncode == EXIT_STALE and "stale" in stale.stderr
    assert json.loads(run("stats", queue_name).stdout)["acked"] == 1
    # Delay, stdin payload and change-visibility.
    assert run("put", queue_name, "-", stdin="from stdin").returncode == 0
    m2 = json.loads(run("get", queue_name).stdout)
    assert m2["payload"] == "from stdin"
    released = run("change-visibility", queue_name, m2["pop_receipt"], "0")
    assert released.returncode == 0 and released.stdout.strip().startswith("r2")
    rep = run("repair", queue_name, "--dry-run")
    assert rep.returncode == 0 and json.loads(rep.stdout)["dry_run"] is True
    assert run("delete-queue", queue_name).returncode == 0
    gone = run("stats", queue_name)
    assert gone.returncode == EXIT_NOT_FOUND
    assert gone.stderr.count("\n") == 1 and "does not exist" in gone.stderr


def test_bootstrap_is_idempotent(run):
    for _ in range(2):
        r = run("bootstrap")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["schema_version"] >= 1


def test_errors_are_one_line_without_traceback(run, queue_name):
    r = run("create-queue", queue_name, "--bucket-size", "0")
    assert r.returncode == 2  # a bad value, like a bad flag
    assert r.stderr.startswith("cassieq: error: bucket size must be")
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    r = run("create-queue", "bad name")
    assert r.returncode == 2 and "invalid queue name" in r.stderr
    r = run("put", queue_name, "x", "--delay", "-3")
    assert r.returncode == EXIT_NOT_FOUND  # the queue does not exist: named first
    debug = run("--debug", "stats", queue_name)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_unreachable_cluster_and_password_never_printed(run):
    secret = "s3cr3t-pw"
    r = run(
        "--port",
        "1",
        "--username",
        "alice",
        "list-queues",
        env_extra={"CASSIEQ_PASSWORD": secret},
    )
    assert r.returncode == 1
    assert "cannot reach Cassandra at 127.0.0.1:1" in r.stderr
    assert secret not in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


def test_help_documents_exit_statuses(run):
    r = run("--help")
    assert r.returncode == 0
    assert f"{EXIT_EMPTY}  get: the queue has no visible message" in r.stdout
    assert "CASSIEQ_PASSWORD" in r.stdout
    assert run("frobnicate").returncode == 2
