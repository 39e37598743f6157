"""Operating the service: health and readiness, Prometheus metrics, the access log with
request ids, the original's environment variable names, and SIGTERM draining a request in
flight before the process exits."""

from __future__ import annotations

import secrets
import signal
import threading
import time
import uuid

from support.service_harness import start_server, start_test_server


def test_health_ready_metrics_and_the_access_log(
    cassandra, own_keyspace_client, cassieq_options, tmp_path
):
    """On a keyspace of its own: /metrics lists a bounded number of queues by name, and the
    shared test keyspace holds the queues of every other test."""
    keyspace = own_keyspace_client.config.keyspace
    server = start_test_server(
        tmp_path, cassandra, {**cassieq_options, "keyspace": keyspace}, "--stats-seconds", "1"
    )
    try:
        assert server.call("GET", "/health").json()["status"] == "ok"
        assert server.call("GET", "/ready").json()["status"] == "ready"
        name = f"acct-{uuid.uuid4().hex[:10]}"
        key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}", "X-Request-Id": "trace-me-42"}
        base = f"/api/v1/accounts/{name}/queues"
        assert server.call("POST", base, '{"queueName":"q"}', auth).status == 201
        r = server.call("POST", base + "/q/messages", "m", auth)
        assert r.headers["x-request-id"] == "trace-me-42"
        assert len(server.call("GET", "/health").headers["x-request-id"]) == 16
        server.call("GET", base + "/nope", headers=auth)
        # the queue stats are a snapshot refreshed in the background (every second here)
        deadline = time.monotonic() + 10
        while True:
            text = server.call("GET", "/metrics", headers=server.operator()).body.decode()
            if f'cassieq_queue_backlog{{queue="{name}.q"}}' in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        route = 'route="/api/v1/accounts/{account}/queues/{queue}/messages"'
        assert f'cassieq_http_requests_total{{method="POST",{route},status="201"}} 1.0' in text
        assert 'method="GET",route="/api/v1/accounts/{account}/queues/{queue}",status="404"' in text
        assert "cassieq_http_request_seconds_bucket{" in text
        assert f'cassieq_queue_backlog{{queue="{name}.q"}} 1.0' in text
        assert f'cassieq_queue_oldest_age_seconds{{queue="{name}.q"}}' in text
        log = server.log()
        assert f"POST {base}/q/messages 201" in log and "id=trace-me-42" in log
        assert key not in log  # keys never reach the log
    finally:
        server.stop()


def test_the_original_environment_variable_names_configure_cassandra(
    cassandra, queue_client, cassieq_options, tmp_path
):
    """KEYSPACE and CONTACT_POINTS as the original's container took them (no CASSIEQ_*
    variables, no connection flags but the port)."""
    server = start_server(
        tmp_path,
        ["203.0.113.1"],  # a flag would win: the harness passes this, overridden below
        cassandra.port,
        "unused",
        secrets.token_urlsafe(32),
        secrets.token_urlsafe(24),
        env={
            "CONTACT_POINTS": cassandra.contact_points[0],
            "KEYSPACE": cassieq_options["keyspace"],
        },
        connection_flags=False,
    )
    try:
        assert server.call("GET", "/ready").json()["status"] == "ready"
        assert server.admin("POST", "/accounts", f"env-{uuid.uuid4().hex[:8]}").status == 201
    finally:
        server.stop()


def test_sigterm_drains_a_long_poll_in_flight_then_exits_cleanly(
    cassandra, queue_client, cassieq_options, tmp_path
):
    server = start_test_server(
        tmp_path,
        cassandra,
        cassieq_options,
    )
    name = f"acct-{uuid.uuid4().hex[:10]}"
    key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
    auth = {"Authorization": f"Key {key}"}
    assert (
        server.call("POST", f"/api/v1/accounts/{name}/queues", '{"queueName":"q"}', auth).status
        == 201
    )
    result = {}

    def poll():
        r = server.call(
            "GET", f"/api/v2/accounts/{name}/queues/q/messages?waitSeconds=3", headers=auth
        )
        result["status"], result["body"] = r.status, r.json()

    t = threading.Thread(target=poll)
    started = time.monotonic()
    t.start()
    time.sleep(1.0)
    server.proc.send_signal(signal.SIGTERM)
    t.join(20)
    assert result == {"status": 200, "body": {"messages": []}}
    assert time.monotonic() - started >= 2.9  # it waited its full 3 s
    # uvicorn re-raises the signal once it has shut down: the exit status is SIGTERM's
    assert server.proc.wait(20) == -signal.SIGTERM
    log = server.log()
    assert "Waiting for background tasks" in log or "Shutting down" in log
    assert "Finished server process" in log
