"""The service is never hung by traffic, over real HTTP: scrapes and dashboard polls hold no
engine thread, long polls wait without one, requests past the bounds on work in progress are
shed at once with a documented 503, slow headers and bodies are cut off, a batch receive's
answer is bounded, ``/ready`` says draining from the first signal, and every bounded setting is
range-checked at start.

Each server here is started with small bounds so that a few requests reach them. A request
that would hang an old server has a timeout, and the harness kills a server that does not stop.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.service_harness import LOOPBACK, Server, start_test_server

from cassieq_spark import cli

JSON = {"Content-Type": "application/json"}


def account(server: Server) -> tuple[str, dict[str, str]]:
    name = f"acct-{uuid.uuid4().hex[:10]}"
    key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
    return name, {"Authorization": f"Key {key}", **JSON}


def create(server: Server, name: str, auth: dict, *queues: str) -> None:
    for q in queues:
        r = server.call(
            "POST", f"/api/v1/accounts/{name}/queues", json.dumps({"queueName": q}), auth
        )
        assert r.status == 201, (r.status, r.body)


def is_shed(r) -> bool:
    """The documented 503 of a bound: JSON {code, message, detail} and Retry-After."""
    return (
        r.status == 503
        and r.headers.get("content-type") == "application/json"
        and r.json()["code"] == 503
        and "detail" in r.json()
        and r.headers.get("retry-after") == "1"
    )


def test_scrapes_and_dashboard_polls_hold_no_engine_thread(cassandra, cassieq_options, tmp_path):
    """One worker, and 16 scrapes and 8 dashboard polls at once from the start (the stats not
    read yet): each is answered, and a request that needs the worker still is."""
    server = start_test_server(tmp_path, cassandra, cassieq_options, "--workers", "1")
    try:
        admin = {"Authorization": f"Key {server.admin_key}"}
        with ThreadPoolExecutor(24) as pool:
            scrapes = [
                pool.submit(server.call, "GET", "/metrics", None, admin, 15) for _ in range(16)
            ]
            polls = [
                pool.submit(server.call, "GET", "/dashboard/queues", None, admin, 15)
                for _ in range(8)
            ]
            assert all(f.result().status == 200 for f in scrapes)
            assert all(f.result().status == 200 for f in polls)
        name = f"acct-{uuid.uuid4().hex[:10]}"
        r = server.call(
            "POST",
            "/admin/api/v1/accounts",
            json.dumps(name),
            {**admin, **JSON},
            timeout=15,
        )
        assert r.status == 201, (r.status, r.body)
    finally:
        server.stop(timeout=10)


@pytest.fixture(scope="module")
def few_workers(cassandra, cassieq_options, tmp_path_factory):
    s = start_test_server(
        tmp_path_factory.mktemp("service-few-workers"),
        cassandra,
        cassieq_options,
        "--workers",
        "2",
        "--max-response-bytes",
        str(64 * 1024),
    )
    yield s
    s.stop(timeout=30)


def test_long_polls_wait_without_holding_an_engine_thread(few_workers):
    """Two workers and ten long polls of an empty queue: a put to another queue does not wait
    for the polls to end."""
    server = few_workers
    name, auth = account(server)
    create(server, name, auth, "empty", "busy")
    poll = f"/api/v2/accounts/{name}/queues/empty/messages?waitSeconds=5"
    with ThreadPoolExecutor(10) as pool:
        polls = [pool.submit(server.call, "GET", poll, None, auth, 20) for _ in range(10)]
        time.sleep(1.0)
        started = time.monotonic()
        r = server.call("POST", f"/api/v1/accounts/{name}/queues/busy/messages", "m", auth)
        took = time.monotonic() - started
        assert r.status == 201
        assert not any(f.done() for f in polls), "the polls ended before the put"
        assert all(f.result().json() == {"messages": []} for f in polls)
    # the polls still had about 4 s to wait: the put did not wait for them
    assert took < 3, took


def test_a_batch_receive_answer_is_bounded_and_the_rest_given_back(few_workers):
    server = few_workers
    name, auth = account(server)
    create(server, name, auth, "big")
    payload = "x" * 20_000
    body = {"messages": [{"message": f"{i}{payload}"} for i in range(10)]}
    v2 = f"/api/v2/accounts/{name}/queues/big"
    assert server.call("POST", f"{v2}/messages", json.dumps(body), auth).status == 200
    first = server.call("GET", f"{v2}/messages?max=10", headers=auth).json()["messages"]
    # 64 KiB holds three 20 kB payloads, not four
    assert len(first) == 3, len(first)
    rest = server.call("GET", f"{v2}/messages?max=10", headers=auth).json()["messages"]
    # what did not fit was given back at once, its delivery not counted
    assert len(rest) == 3 and all(m["deliveryCount"] == 1 for m in rest), rest
    stats = server.call("GET", f"{v2}/stats", headers=auth).json()
    assert (stats["backlog"], stats["inFlight"]) == (4, 6), stats


def test_requests_past_the_bound_in_progress_are_shed_with_a_json_503(
    cassandra, cassieq_options, tmp_path
):
    server = start_test_server(
        tmp_path,
        cassandra,
        cassieq_options,
        "--max-requests",
        "3",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
    )
    try:
        name, auth = account(server)
        create(server, name, auth, "q")
        poll = f"/api/v2/accounts/{name}/queues/q/messages?waitSeconds=3"
        with ThreadPoolExecutor(3) as pool:
            polls = [pool.submit(server.call, "GET", poll, None, auth, 20) for _ in range(3)]
            time.sleep(1.0)
            shed = server.call("GET", f"/api/v1/accounts/{name}/queues", headers=auth)
            assert is_shed(shed), (shed.status, shed.headers, shed.body)
            assert server.call("GET", "/health").status == 200  # probes are answered
            assert all(f.result().status == 200 for f in polls)
        assert server.call("GET", f"/api/v1/accounts/{name}/queues", headers=auth).status == 200

        # a head trickled a byte at a time is cut off after the header timeout
        with socket.create_connection((LOOPBACK, server.port)) as s:
            started = time.monotonic()
            closed = False
            for ch in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                try:
                    s.sendall(bytes([ch]))
                except OSError:
                    closed = True
                    break
                s.settimeout(0.3)
                try:
                    if s.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    pass
            assert closed and time.monotonic() - started < 5, time.monotonic() - started

        # a body that stops arriving is a 408 after the body timeout
        with socket.create_connection((LOOPBACK, server.port)) as s:
            s.sendall(
                (
                    f"POST /api/v1/accounts/{name}/queues/q/messages HTTP/1.1\r\nHost: x\r\n"
                    f"Authorization: {auth['Authorization']}\r\nContent-Length: 100\r\n\r\n"
                    "only ten b"
                ).encode()
            )
            s.settimeout(10)
            started = time.monotonic()
            raw = b""
            while b"\r\n\r\n" not in raw:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
            assert raw.startswith(b"HTTP/1.1 408"), raw[:200]
            assert time.monotonic() - started < 5
    finally:
        server.stop(timeout=30)


def test_engine_calls_past_the_waiting_bound_are_shed_with_a_json_503(
    cassandra, cassieq_options, tmp_path
):
    server = start_test_server(
        tmp_path, cassandra, cassieq_options, "--workers", "1", "--max-waiting-calls", "0"
    )
    try:
        name, auth = account(server)
        create(server, name, auth, *(f"q{i}" for i in range(4)))
        base = f"/api/v1/accounts/{name}/queues"
        with ThreadPoolExecutor(24) as pool:
            replies = list(
                pool.map(
                    lambda i: server.call("POST", f"{base}/q{i % 4}/messages", f"m{i}", auth),
                    range(96),
                )
            )
        statuses = [r.status for r in replies]
        assert set(statuses) <= {201, 503}, statuses
        assert 201 in statuses and 503 in statuses, statuses
        assert all(is_shed(r) for r in replies if r.status == 503)
    finally:
        server.stop(timeout=30)


def test_ready_answers_draining_from_the_first_signal(cassandra, cassieq_options, tmp_path):
    server = start_test_server(tmp_path, cassandra, cassieq_options, "--drain-notice-seconds", "2")
    try:
        name, auth = account(server)
        create(server, name, auth, "q")
        poll = f"/api/v2/accounts/{name}/queues/q/messages?waitSeconds=2"
        result: list = []
        t = threading.Thread(target=lambda: result.append(server.call("GET", poll, headers=auth)))
        t.start()
        time.sleep(0.5)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        r = server.call("GET", "/ready", timeout=5)
        assert r.status == 503 and r.json()["status"] == "draining", (r.status, r.body)
        t.join(10)
        assert result and result[0].status == 200, result
        assert server.proc.wait(20) is not None
    finally:
        server.stop(timeout=10)


BAD_SETTINGS = [
    (["--workers", "0"], "--workers"),
    (["--workers", "-5"], "--workers"),
    (["--clock-skew", "1e308"], "--clock-skew"),
    (["--clock-skew", "nan"], "--clock-skew"),
    (["--clock-skew", "-60"], "--clock-skew"),
    (["--clock-skew", "1e9"], "--clock-skew"),
    (["--max-body-bytes", "-1"], "--max-body-bytes"),
    (["--repair", "--repair-interval", "0"], "--repair-interval"),
    (["--drain-seconds", "-1"], "--drain-seconds"),
    (["--max-requests", "0"], "--max-requests"),
    (["--header-timeout", "inf"], "--header-timeout"),
    (["--body-timeout", "0"], "--body-timeout"),
    (["--max-response-bytes", "10"], "--max-response-bytes"),
    (["--stats-seconds", "0"], "--stats-seconds"),
]


def start_and_end(argv: list[str], fifo: os.PathLike | None = None) -> int:
    """``cassieq <argv>``'s exit status; a test failure when it is still running after 10 s
    (a service that started with a bad setting, or a start blocked on its secret file)."""
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(cli.main(argv)), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        if fifo is not None:  # let a blocked open go
            with open(fifo, "wb"):
                pass
        pytest.fail(f"cassieq {' '.join(argv)} was still running after 10 s")
    return result[0]


def test_every_bounded_setting_is_range_checked_at_start(
    cassieq_options, tmp_path, monkeypatch, capsys
):
    """Each bad value ends ``cassieq serve`` at once with an error naming the flag, its
    variable and its range, before any Cassandra is reached."""
    (tmp_path / "secret").write_text("s" * 32)
    for k in [k for k in os.environ if k.startswith("CASSIEQ_")]:
        monkeypatch.delenv(k)
    serve = ["--port", cassieq_options["port"], "serve", "--secret-file", str(tmp_path / "secret")]
    for extra, flag in BAD_SETTINGS:
        assert start_and_end([*serve, *extra]) != 0, extra
        err = capsys.readouterr().err
        assert flag in err and " to " in err, (extra, err)
    monkeypatch.setenv("CASSIEQ_WORKERS", "0")
    assert start_and_end(serve) != 0
    assert "CASSIEQ_WORKERS" in capsys.readouterr().err


def test_a_secret_file_that_never_ends_or_never_opens_is_refused(
    cassieq_options, tmp_path, monkeypatch, capsys
):
    """A FIFO nobody writes (opening it would wait for ever) and a device: refused at once."""
    for k in [k for k in os.environ if k.startswith("CASSIEQ_")]:
        monkeypatch.delenv(k)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for secret in (str(fifo), "/dev/zero"):
        argv = ["--port", cassieq_options["port"], "serve", "--secret-file", secret]
        assert start_and_end(argv, fifo) != 0
        assert "not a regular file" in capsys.readouterr().err
