"""What the service claims reaches a client, over real HTTP: a v2 receive gives back what it
claimed for a client that left (as a v1 get does), ``HEAD`` on the routes that claim claims
nothing, and a queue deleted while requests of it run answers them 404 (never 500) while the
requests of other queues go on."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.service_harness import LOOPBACK, Server

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def acct(server: Server):
    name = f"acct-{uuid.uuid4().hex[:10]}"
    key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
    return name, key, {"Authorization": f"Key {key}", **JSON}


def leave_after(server: Server, path: str, key: str, seconds: float, reset: bool) -> bytes:
    """Send a GET, leave after ``seconds`` (by a FIN, or a reset), return what had arrived."""
    raw = f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}\r\nAuthorization: Key {key}\r\n\r\n"
    with socket.create_connection((LOOPBACK, server.port)) as s:
        s.sendall(raw.encode())
        s.settimeout(seconds)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            pass
        if reset:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return got


def test_v2_receive_gives_back_what_it_claimed_for_clients_that_left(server, acct, queue_client):
    name, key, auth = acct
    v1 = f"/api/v1/accounts/{name}/queues"
    v2 = f"/api/v2/accounts/{name}/queues"
    body = json.dumps({"queueName": "q", "maxDeliveryCount": 2})
    assert server.call("POST", v1, body, auth).status == 201
    # Three consumers whose own timeout (0.5 s) is shorter than their long poll (5 s) and whose
    # visibility timeout is 1 s: each leaves before the message is put. A server that claims
    # for them delivers it three times to nobody, and the third delivery drops it (no DLQ).
    path = f"{v2}/q/messages?waitSeconds=5&invisibilityTimeSeconds=1"
    with ThreadPoolExecutor(3) as pool:
        gone = [pool.submit(leave_after, server, path, key, 0.5, i % 2 == 1) for i in range(3)]
        time.sleep(1.0)
        assert server.call("POST", f"{v1}/q/messages", "only one", auth).status == 201
        replies = [f.result() for f in gone]
    assert not any(replies), replies  # nothing had arrived before they left
    time.sleep(5)  # past every poll those consumers started
    stats = server.call("GET", f"{v2}/q/stats", headers=auth).json()
    assert (stats["dropped"], stats["deadLettered"]) == (0, 0), stats
    got = server.call("GET", f"{v2}/q/messages", headers=auth).json()["messages"]
    # The first delivery to a client that stayed: no delivery to a client that left counted.
    assert [(m["message"], m["deliveryCount"]) for m in got] == [("only one", 1)], got


@pytest.mark.parametrize("version", [1, 2])
def test_head_on_a_route_that_claims_claims_nothing(server, acct, version):
    name, key, auth = acct
    v1 = f"/api/v1/accounts/{name}/queues"
    assert server.call("POST", v1, json.dumps({"queueName": "q"}), auth).status == 201
    assert server.call("POST", f"{v1}/q/messages", "m", auth).status == 201
    claim = (
        f"{v1}/q/messages/next"
        if version == 1
        else f"/api/v2/accounts/{name}/queues/q/messages?max=10"
    )
    for _ in range(3):
        r = server.call("HEAD", claim, headers=auth)
        assert r.status == 405 and r.headers.get("allow") == "GET", (r.status, r.headers)
    got = server.call("GET", f"{v1}/q/messages/next", headers=auth)
    assert got.status == 200 and got.json()["deliveryCount"] == 0, got.body


def test_a_queue_deleted_during_its_requests_answers_404_and_other_queues_go_on(server, acct):
    """One client creates queue ``q<k+1>`` and deletes ``q<k>``, in a loop, while others get,
    receive, read statistics of and put batches to the newest queue, and put to ``other``:
    every answer is a success or that queue's 404 (JSON, the queue named), never a 5xx; every
    put to ``other`` succeeds."""
    name, key, auth = acct
    v1 = f"/api/v1/accounts/{name}/queues"
    v2 = f"/api/v2/accounts/{name}/queues"
    for q in ("q0", "other"):
        assert server.call("POST", v1, json.dumps({"queueName": q}), auth).status == 201
    stop = threading.Event()
    current = [0]
    statuses: Counter[tuple[str, int]] = Counter()
    bad: list[tuple[str, int, bytes]] = []
    lock = threading.Lock()

    def churn() -> None:
        while not stop.is_set():
            k = current[0]
            server.call("POST", f"{v1}/q{k}/messages", "m", auth)
            assert (
                server.call("POST", v1, json.dumps({"queueName": f"q{k + 1}"}), auth).status == 201
            )
            current[0] = k + 1
            time.sleep(0.02)
            server.call("DELETE", f"{v1}/q{k}", headers=auth)

    def use(i: int) -> None:
        calls = [
            ("next", lambda q: server.call("GET", f"{v1}/{q}/messages/next", headers=auth)),
            ("receive", lambda q: server.call("GET", f"{v2}/{q}/messages?max=5", headers=auth)),
            ("statistics", lambda q: server.call("GET", f"{v1}/{q}/statistics", headers=auth)),
            ("stats", lambda q: server.call("GET", f"{v2}/{q}/stats", headers=auth)),
        ]
        n = i
        while not stop.is_set():
            # the newest queue, or the one being deleted now
            q = f"q{max(current[0] - n % 2, 0)}"
            what, call = calls[n % len(calls)]
            r = call(q)
            with lock:
                statuses[(what, r.status)] += 1
                if r.status >= 500 or (r.status == 404 and r.json().get("queueName") != q):
                    bad.append((what, r.status, r.body[:300]))
            n += 1

    others: list[int] = []

    def put_other() -> None:
        while not stop.is_set():
            others.append(server.call("POST", f"{v1}/other/messages", "o", auth).status)

    with ThreadPoolExecutor(10) as pool:
        futures = [pool.submit(churn), pool.submit(put_other)]
        futures += [pool.submit(use, i) for i in range(8)]
        time.sleep(5)
        stop.set()
        for f in futures:
            f.result()
    assert not bad, (bad[:5], dict(statuses))
    assert others and set(others) == {201}, Counter(others)
    # The race was met: some requests found their queue gone.
    assert sum(n for (_, status), n in statuses.items() if status == 404) > 0, dict(statuses)
