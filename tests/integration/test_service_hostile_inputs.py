"""Hostile values over real HTTP: each is a 4xx with a documented JSON body, never a 500; an
error nobody foresaw is the documented JSON 500 naming the id it was logged under; made-up
methods add a bounded number of metric series; a refused value is echoed cut short."""

from __future__ import annotations

import json
import re
import time
import uuid
from urllib.parse import quote

import pytest
from support.service_harness import Server, start_test_server

JSON = {"Content-Type": "application/json"}
# Dates whose conversion to UTC leaves the calendar: year 9999 at a negative offset, year 1
# at a positive one.
OVERFLOWING_TIMES = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+01:00"]
# Characters str.isdigit() calls digits that int() refuses, and digits of other scripts.
UNICODE_NUMBERS = ["²", "١٢", "¹0", "-²", "𝟏"]


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, tmp_path_factory):
    s = start_test_server(tmp_path_factory.mktemp("service-hostile"), cassandra, cassieq_options)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def acct(server: Server):
    name = f"acct-{uuid.uuid4().hex[:10]}"
    key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
    auth = {"Authorization": f"Key {key}", **JSON}
    base = f"/api/v1/accounts/{name}/queues"
    assert server.call("POST", base, json.dumps({"queueName": "q"}), auth).status == 201
    return name, auth, base


def is_documented_4xx(r) -> bool:
    if not 400 <= r.status < 500 or r.headers.get("content-type") != "application/json":
        return False
    body = r.json()
    return (
        {"code", "message"} <= set(body)
        or set(body) == {"errors"}
        or {"reason", "operation", "message"} <= set(body)
    )


def test_request_times_past_the_calendar_are_401_json(server, acct):
    name, _, base = acct
    for when in OVERFLOWING_TIMES:
        for r in (
            server.call(
                "GET",
                base,
                headers={"Authorization": "Signed x", "X-Cassieq-Request-Time": when},
            ),
            server.call("GET", f"{base}?auth=g&sig=x&st={quote(when)}"),
            server.call("GET", f"{base}?auth=g&sig=x&et={quote(when)}"),
        ):
            assert r.status == 401 and is_documented_4xx(r), (when, r.status, r.body)
        perm = server.admin(
            "POST", "/permissions", {"accountName": name, "levels": ["r"], "startTime": when}
        )
        assert perm.status == 422 and is_documented_4xx(perm), (when, perm.status, perm.body)


def test_numbers_in_other_scripts_are_400_json(server, acct):
    name, auth, base = acct
    v2 = f"/api/v2/accounts/{name}/queues/q/messages"
    for text in UNICODE_NUMBERS:
        value = quote(text)
        for method, path in [
            ("GET", f"{base}/q/messages/next?invisibilityTimeSeconds={value}"),
            ("POST", f"{base}/q/messages?initialInvisibilitySeconds={value}"),
            ("GET", f"{v2}?max={value}"),
            ("GET", f"{v2}?waitSeconds={value}"),
            ("GET", f"{v2}?invisibilityTimeSeconds={value}"),
        ]:
            r = server.call(method, path, "m" if method == "POST" else None, auth)
            assert r.status == 400 and is_documented_4xx(r), (text, path, r.status, r.body)
    # nothing was put or claimed by any of them
    stats = server.call("GET", f"/api/v2/accounts/{name}/queues/q/stats", headers=auth).json()
    assert (stats["backlog"], stats["inFlight"], stats["enqueued"]) == (0, 0, 0), stats


def test_a_refused_value_is_echoed_cut_short(server, acct):
    name, auth, base = acct
    huge = "x" * 200_000
    r = server.call("POST", base, json.dumps({"queueName": "q2", "bucketSize": huge}), auth)
    assert r.status == 422 and len(r.body) < 1000, (r.status, len(r.body))
    patch = server.call("PATCH", f"/api/v2/accounts/{name}/queues/q", json.dumps({huge: 1}), auth)
    assert patch.status == 422 and len(patch.body) < 1000, (patch.status, len(patch.body))


def test_an_unforeseen_error_is_the_documented_json_500_with_its_log_id(server, acct, queue_client):
    """A queue row no version of the service writes (no repair timeout) makes the definition
    route fail where no check foresaw it."""
    name, auth, base = acct
    engine = f"{name}.broken"
    session = queue_client.conn.session
    ks = queue_client.config.keyspace
    session.execute(
        f"INSERT INTO {ks}.queues (name, queue_id, bucket_size, max_delivery_count) "
        "VALUES (%s, uuid(), 20, 5)",
        (engine,),
    )
    try:
        r = server.call("GET", f"{base}/broken", headers={**auth, "X-Request-Id": "probe-500"})
    finally:
        session.execute(f"DELETE FROM {ks}.queues WHERE name = %s", (engine,))
    assert r.status == 500, (r.status, r.body)
    assert r.headers["content-type"] == "application/json", r.headers
    assert r.json() == {
        "code": 500,
        "message": "There was an error processing your request. It has been logged (ID probe-500).",
    }
    # logged right after the answer is sent
    deadline = time.monotonic() + 10
    while not re.search(r"failed \(ID probe-500\)", server.log()):
        assert time.monotonic() < deadline, "no traceback logged under the id"
        time.sleep(0.1)


def series(server: Server) -> int:
    text = server.call("GET", "/metrics", headers=server.operator()).body.decode()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def test_made_up_methods_add_a_bounded_number_of_metric_series(server, acct):
    _, auth, base = acct
    before = series(server)
    for i in range(60):
        path = "/nothing/here" if i % 2 else f"{base}/q"
        r = server.call(f"FOO{i}", path, headers=auth)
        assert is_documented_4xx(r), (i, r.status, r.body)
    grown = series(server) - before
    # one (route, method="other", status) combination per path kind, each a counter and a
    # histogram: a fixed number, not one per method
    assert grown <= 64, grown
    for i in range(60, 120):
        server.call(f"BAR{i}", "/nothing/here" if i % 2 else f"{base}/q", headers=auth)
    assert series(server) - before == grown
