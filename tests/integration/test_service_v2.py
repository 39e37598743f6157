"""The v2 batch routes over real HTTP: batch receive with long polling, batch ack and batch
visibility with a result per entry, stats, redrive, purge, and the OpenAPI document."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from support.service_harness import start_test_server

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, tmp_path_factory):
    s = start_test_server(
        tmp_path_factory.mktemp("service-v2"),
        cassandra,
        cassieq_options,
    )
    yield s
    s.stop()


@pytest.fixture
def acct(server):
    name = f"acct-{uuid.uuid4().hex[:10]}"
    key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
    auth = {"Authorization": f"Key {key}"}

    def call(method, tail, body=None, version=2):
        base = f"/api/v{version}/accounts/{name}/queues"
        data = body if body is None or isinstance(body, str) else json.dumps(body)
        return server.call(method, base + tail, data, {**auth, **JSON})

    return call


def test_batch_receive_returns_up_to_max_and_acks_per_entry(acct):
    assert acct("POST", "", {"queueName": "q"}, version=1).status == 201
    for i in range(5):
        acct("POST", "/q/messages", f"m{i}", version=1)
    r = acct("GET", "/q/messages?max=3")
    assert r.status == 200
    got = r.json()["messages"]
    assert [m["message"] for m in got] == ["m0", "m1", "m2"]
    assert all(m["deliveryCount"] == 1 and m["encoding"] == "utf-8" for m in got)
    rest = acct("GET", "/q/messages?max=10").json()["messages"]
    assert [m["message"] for m in rest] == ["m3", "m4"]
    receipts = [m["popReceipt"] for m in got]
    r = acct("POST", "/q/messages/ack", {"popReceipts": [*receipts, receipts[0], "garbage"]})
    assert r.status == 200
    assert [x["status"] for x in r.json()["results"]] == ["ok", "ok", "ok", "stale", "invalid"]
    vis = acct(
        "POST",
        "/q/messages/visibility",
        {
            "entries": [{"popReceipt": m["popReceipt"], "invisibilitySeconds": 0} for m in rest]
            + [{"popReceipt": receipts[0], "invisibilitySeconds": 5}]
        },
    )
    results = vis.json()["results"]
    assert [x["status"] for x in results] == ["ok", "ok", "stale"]
    assert all(x["newPopReceipt"] for x in results[:2])
    again = acct("GET", "/q/messages?max=10").json()["messages"]
    assert sorted(m["message"] for m in again) == ["m3", "m4"]
    assert all(m["deliveryCount"] == 2 for m in again)


def test_batch_receive_long_polls_until_a_message_comes(acct):
    assert acct("POST", "", {"queueName": "q"}, version=1).status == 201
    started = time.monotonic()
    empty = acct("GET", "/q/messages?waitSeconds=1")
    assert empty.json() == {"messages": []} and time.monotonic() - started >= 0.9
    threading.Timer(1.0, lambda: acct("POST", "/q/messages", "late", version=1)).start()
    started = time.monotonic()
    r = acct("GET", "/q/messages?waitSeconds=10&max=5")
    took = time.monotonic() - started
    assert [m["message"] for m in r.json()["messages"]] == ["late"]
    assert 0.8 < took < 8, took


def test_stats_redrive_and_purge(acct):
    assert acct("POST", "", {"queueName": "dlq"}, version=1).status == 201
    assert (
        acct(
            "POST", "", {"queueName": "q", "dlqName": "dlq", "maxDeliveryCount": 1}, version=1
        ).status
        == 201
    )
    acct("POST", "/q/messages?initialInvisibilitySeconds=600", "delayed", version=1)
    acct("POST", "/q/messages", "poison", version=1)
    acct("POST", "/q/messages", "visible", version=1)
    assert (
        acct("GET", "/q/messages?max=1&invisibilityTimeSeconds=1").json()["messages"][0]["message"]
        == "poison"
    )
    s = acct("GET", "/q/stats").json()
    assert (s["backlog"], s["inFlight"], s["delayed"]) == (1, 1, 1)
    assert s["enqueued"] == 3 and s["oldestAgeSeconds"] >= 0
    # poison goes to the dead-letter queue after its one delivery
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and acct("GET", "/dlq/stats").json()["backlog"] == 0:
        acct("GET", "/q/messages?max=10&invisibilityTimeSeconds=600")
        time.sleep(0.5)
    assert acct("GET", "/dlq/stats").json()["backlog"] == 1
    assert acct("POST", "", {"queueName": "again"}, version=1).status == 201
    r = acct("POST", "/dlq/redrive", {"to": "again"})
    assert (r.status, r.json()) == (200, {"from": "dlq", "to": "again", "moved": 1})
    assert acct("GET", "/again/messages").json()["messages"][0]["message"] == "poison"
    assert acct("POST", "/dlq/redrive", {"to": "missing"}).status == 404
    purged = acct("POST", "/q/purge")
    assert purged.status == 200 and purged.json()["purged"] >= 1
    s = acct("GET", "/q/stats").json()
    assert (s["backlog"], s["delayed"]) == (0, 0)


def test_v2_refuses_bad_batches_with_documented_errors(acct):
    assert acct("POST", "", {"queueName": "q"}, version=1).status == 201
    for tail, body in (
        ("/q/messages/ack", {"popReceipts": "x"}),
        ("/q/messages/ack", {"popReceipts": []}),
        ("/q/messages/ack", {"popReceipts": ["a"] * 1001}),
        ("/q/messages/visibility", {"entries": [{"popReceipt": 5}]}),
        ("/q/redrive", {}),
    ):
        r = acct("POST", tail, body)
        assert r.status == 422 and "errors" in r.json(), (tail, r)
    assert acct("GET", "/q/messages?max=0").status == 400
    assert acct("GET", "/q/messages?waitSeconds=21").status == 400
    assert acct("GET", "/nope/stats").json()["reason"] == "NotFound"


def test_the_server_serves_its_openapi_document_and_docs_page(server):
    doc = server.call("GET", "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert server.call("GET", "/api/v2/openapi.json").json() == doc  # its v2 address
    paths = doc["paths"]
    assert {
        "/api/v2/accounts/{account}/queues/{queue}" + tail
        for tail in (
            "",
            "/messages",
            "/messages/ack",
            "/messages/visibility",
            "/stats",
            "/redrive",
            "/purge",
        )
    } <= set(paths)
    # v1 and the admin API are in the same document
    assert "/api/v1/accounts/{account}/queues/{queue}/messages/next" in paths
    assert "/admin/api/v1/accounts" in paths
    page = server.call("GET", "/api/v2/docs")
    assert page.status == 200 and b"/openapi.json" in page.body
    assert page.headers["content-type"].startswith("text/html")
