"""Progress of the command line off a terminal: JSON lines on stderr, the command's own output
alone on stdout (``put --ndjson``'s ids, a redrive's report); ``--progress off`` says nothing;
move flags out of range are refused."""

from __future__ import annotations

import json
import uuid

import pytest

pytestmark = [pytest.mark.integration]


def _progress(stderr: str) -> list[dict]:
    return [json.loads(x) for x in stderr.splitlines() if x.startswith('{"progress"')]


def test_put_ndjson_and_redrive_report_progress_on_stderr_only(run, queue_name):
    dlq = f"{queue_name}_dlq"
    assert run("create-queue", dlq).returncode == 0
    assert run("create-queue", queue_name, "--dead-letter-queue", dlq).returncode == 0
    stdin = "".join(json.dumps({"payload": f"m{i}"}) + "\n" for i in range(1500))
    put = run("put", dlq, "--ndjson", stdin=stdin)
    assert put.returncode == 0, put.stderr
    assert len([int(x) for x in put.stdout.split()]) == 1500  # ids only
    lines = _progress(put.stderr)
    assert lines[0]["progress"] == "put" and lines[0]["done"] > 0 and lines[0]["total"] == 1500
    assert lines[-1]["finished"] and lines[-1]["done"] == 1500

    moved = run("redrive", dlq, "--to", queue_name, "--batch-size", "500")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["moved"] == 1500
    last = _progress(moved.stderr)[-1]
    assert last["progress"] == "redrive" and last["subject"] == f"{dlq} -> {queue_name}"
    assert last["finished"] and last["moved"] == 1500 and last["taken_over"] == 0

    quiet = run("--progress", "off", "purge", queue_name)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["purged"] == 1500


def test_move_flags_out_of_range_are_refused(run, queue_name):
    bad = run("move", queue_name, "--to", "x", "--batch-size", "5000")
    assert bad.returncode == 2 and "--batch-size must be 1 to 1000, got 5000" in bad.stderr
    slow = run("redrive", queue_name, "--to", "x", "--rate", "0")
    assert slow.returncode == 2 and "--rate must be a positive number" in slow.stderr


def test_serve_logs_json_lines_with_request_id_and_account(cassandra, cassieq_options, tmp_path):
    from support.service_harness import start_test_server

    server = start_test_server(
        tmp_path, cassandra, cassieq_options, env={"CASSIEQ_LOG_FORMAT": "json"}
    )
    account = f"acct-{uuid.uuid4().hex[:10]}"
    try:
        made = server.admin("POST", "/accounts", account)
        assert made.status in (200, 201), made.body
        key = made.json()["keys"]["primary"]
        got = server.call(
            "GET",
            f"/api/v1/accounts/{account}/queues",
            None,
            {"Authorization": f"Key {key}", "X-Request-Id": "req-logs-1"},
        )
        assert got.status == 200
    finally:
        server.stop()
    lines = [json.loads(x) for x in server.log().splitlines() if x.startswith("{")]
    assert lines, server.log()
    assert all({"timestamp", "level", "logger", "message"} <= set(x) for x in lines)
    access = [x for x in lines if x.get("request_id") == "req-logs-1"]
    assert [x["logger"] for x in access] == ["cassieq_spark.service.access"]
    assert access[0]["account"] == account and access[0]["level"] == "INFO"
    assert any(x["logger"] == "cassieq_spark.service.server" for x in lines)
