"""A sweep of malformed requests over real HTTP: bad JSON, wrong types, huge bodies, bad
receipts, path tricks, bad signatures and header floods each get a 4xx JSON error of a
documented shape (docs/service.md), never a 500 or a traceback, and change nothing."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import uuid

import pytest
from support.service_harness import LOOPBACK, Server, start_test_server

JSON = {"Content-Type": "application/json"}
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, tmp_path_factory):
    s = start_test_server(
        tmp_path_factory.mktemp("service-sweep"),
        cassandra,
        cassieq_options,
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def acct(server: Server):
    name = f"acct-{uuid.uuid4().hex[:10]}"
    keys = server.admin("POST", "/accounts", name).json()["keys"]
    auth = {"Authorization": f"Key {keys['primary']}"}
    base = f"/api/v1/accounts/{name}/queues"
    assert server.call("POST", base, '{"queueName":"q"}', {**auth, **JSON}).status == 201
    assert server.call("POST", base + "/q/messages", "keep me", auth).status == 201
    return name, auth, base


def documented(body: bytes) -> bool:
    """One of the three documented error shapes."""
    value = json.loads(body)
    if not isinstance(value, dict):
        return False
    if set(value) - {"detail"} == {"code", "message"}:
        return isinstance(value["code"], int) and isinstance(value["message"], str)
    if set(value) == {"errors"}:
        return isinstance(value["errors"], list) and all(
            isinstance(e, str) for e in value["errors"]
        )
    return {"reason", "operation", "message"} <= set(value)


def cases(name: str, auth: dict, base: str) -> list[tuple[str, str, str, bytes | None, dict]]:
    other_queue_receipt = "r2" + base64.urlsafe_b64encode(os.urandom(40)).decode().rstrip("=")
    deep = "[" * 100_000 + "]" * 100_000
    h = {**auth, **JSON}
    out = [
        # bad JSON
        ("json-truncated", "POST", base, b'{"queueName":', h),
        ("json-single-quotes", "POST", base, b"{'queueName':'x'}", h),
        ("json-nan", "POST", base, b'{"queueName":"x","bucketSize":NaN}', h),
        ("json-deep", "POST", base, deep.encode(), h),
        ("json-not-utf8", "POST", base, b'{"queueName":"\xff\xfe"}', h),
        ("json-huge-number", "POST", base, b'{"queueName":"x","bucketSize":1e999}', h),
        ("json-update-garbage", "PUT", base + "/q/messages?popReceipt=r1AAAA", b"{{{", h),
        # wrong types
        ("type-name-number", "POST", base, b'{"queueName":5}', h),
        ("type-body-list", "POST", base, b'["q"]', h),
        ("type-body-string", "POST", base, b'"q"', h),
        ("type-bucket-float", "POST", base, b'{"queueName":"x","bucketSize":2.5}', h),
        ("type-update-message", "PUT", base + "/q/messages?popReceipt=r1AAAA", b'{"message":5}', h),
        (
            "type-update-seconds",
            "PUT",
            base + "/q/messages?popReceipt=r1AAAA",
            b'{"newInvisibilitySeconds":"x"}',
            h,
        ),
        ("type-vt-text", "GET", base + "/q/messages/next?invisibilityTimeSeconds=abc", None, auth),
        (
            "type-vt-negative",
            "GET",
            base + "/q/messages/next?invisibilityTimeSeconds=-1",
            None,
            auth,
        ),
        ("type-vt-float", "GET", base + "/q/messages/next?invisibilityTimeSeconds=1.5", None, auth),
        (
            "type-vt-huge",
            "GET",
            base + "/q/messages/next?invisibilityTimeSeconds=99999999999999999999",
            None,
            auth,
        ),
        (
            "type-delay-text",
            "POST",
            base + "/q/messages?initialInvisibilitySeconds=soon",
            b"x",
            auth,
        ),
        # huge bodies
        ("huge-put", "POST", base + "/q/messages", b"x" * (2 * MiB), auth),
        ("huge-create", "POST", base, b'{"queueName":"' + b"x" * (2 * MiB) + b'"}', h),
        ("huge-admin", "POST", "/admin/api/v1/accounts", b'"' + b"a" * (200 * 1024) + b'"', h),
        # bad receipts
        ("receipt-garbage", "DELETE", base + "/q/messages?popReceipt=garbage", None, auth),
        ("receipt-empty", "DELETE", base + "/q/messages?popReceipt=", None, auth),
        (
            "receipt-other-queue",
            "DELETE",
            base + f"/q/messages?popReceipt={other_queue_receipt}",
            None,
            auth,
        ),
        ("receipt-long", "DELETE", base + "/q/messages?popReceipt=r1" + "A" * 5000, None, auth),
        ("receipt-unicode", "DELETE", base + "/q/messages?popReceipt=r1%C3%A9%00", None, auth),
        ("receipt-update", "PUT", base + f"/q/messages?popReceipt={other_queue_receipt}", b"{}", h),
        (
            "receipt-original-form",
            "DELETE",
            base + "/q/messages?popReceipt=MDoyOitoNE5wQQ",
            None,
            auth,
        ),
        # path tricks
        (
            "path-dotdot",
            "GET",
            f"/api/v1/accounts/{name}/queues/../../../admin/api/v1/accounts",
            None,
            auth,
        ),
        ("path-encoded-slash", "GET", base + "/q%2F..%2Fx", None, auth),
        ("path-nul", "GET", base + "/q%00", None, auth),
        ("path-bad-name", "GET", base + "/bad!name", None, auth),
        ("path-long-name", "GET", base + "/" + "q" * 300, None, auth),
        ("path-unicode", "GET", base + "/%C3%A9t%C3%A9", None, auth),
        ("path-other-account-dot", "GET", base + "/..q", None, auth),
        ("path-unknown", "GET", "/api/v1/nothing/here", None, auth),
        ("path-patch", "PATCH", base + "/q", b"{}", h),
        ("path-account-dot", "GET", "/api/v1/accounts/a.b/queues", None, auth),
        # bad signatures and credentials
        (
            "sig-garbage",
            "GET",
            base,
            None,
            {"Authorization": "Signed %%%", "X-Cassieq-Request-Time": "2026-01-01T00:00:00Z"},
        ),
        (
            "sig-bad-time",
            "GET",
            base,
            None,
            {"Authorization": "Signed abc", "X-Cassieq-Request-Time": "2016-13-45T99:99:99Z"},
        ),
        (
            "sig-huge",
            "GET",
            base,
            None,
            {"Authorization": "Signed " + "A" * 20_000, "X-Cassieq-Request-Time": "x"},
        ),
        ("sig-claim-garbage", "GET", base + "?auth=%FF%FE&sig=%00%01&st=yesterday", None, {}),
        (
            "sig-claim-bad-times",
            "GET",
            base + "?auth=g&sig=abc&st=2026-99-99T00:00:00Z&et=x",
            None,
            {},
        ),
        ("key-with-newline", "GET", base, None, {"Authorization": "Key a\tb"}),
        ("admin-no-key", "POST", "/admin/api/v1/accounts", b'"x"', JSON),
        # header floods
        ("headers-many", "GET", base, None, {**auth, **{f"X-F{i}": "v" for i in range(150)}}),
        ("headers-big", "GET", base, None, {**auth, "X-Big": "v" * 40_000}),
    ]
    return out


def test_malformed_requests_get_documented_4xx_json_and_change_nothing(server, acct, queue_client):
    name, auth, base = acct
    before = server.call("GET", base, headers=auth).json()
    statuses = {}
    for case, method, path, body, headers in cases(name, auth, base):
        r = server.call(method, path, body, headers)
        statuses[case] = r.status
        assert 400 <= r.status < 500, (case, r.status, r.body[:300])
        assert r.headers.get("content-type") == "application/json", (case, r.headers)
        assert documented(r.body), (case, r.body[:300])
        assert b"Traceback" not in r.body
    assert statuses["huge-put"] == statuses["huge-create"] == 413
    assert statuses["headers-many"] == statuses["headers-big"] == 431
    assert statuses["path-patch"] == 405
    # nothing changed: same queues, the one message still there, no other account made
    assert server.call("GET", base, headers=auth).json() == before
    assert server.call("GET", base + "/q/statistics", headers=auth).json() == {"size": 1}
    assert queue_client.peek(f"{name}.q")[0].payload == b"keep me"
    accounts = [a["accountName"] for a in server.admin("GET", "/accounts").json()]
    assert "x" not in accounts and not any(a.startswith("aaaa") for a in accounts)
    log = server.log()
    assert "Traceback" not in log and " 500 " not in log


def test_a_header_past_the_parsers_limit_is_refused_and_the_server_lives_on(server, acct):
    """A single header block above 256 KiB never reaches the app: the HTTP parser answers
    400 (plain text, docs/service.md); the server keeps serving."""
    _, auth, base = acct
    with socket.create_connection((LOOPBACK, server.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Flood: " + b"v" * (300 * 1024) + b"\r\n\r\n")
        head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 4"), head[:100]
    assert server.call("GET", base, headers=auth).status == 200


def test_a_body_shorter_than_its_content_length_is_not_a_500(server, acct):
    _, auth, base = acct
    conn = http.client.HTTPConnection(LOOPBACK, server.port, timeout=10)
    conn.putrequest("POST", base + "/q/messages")
    for k, v in auth.items():
        conn.putheader(k, v)
    conn.putheader("Content-Length", str(5 * MiB))
    conn.endheaders()
    conn.send(b"short")
    r = conn.getresponse()
    assert r.status == 413 and documented(r.read())
    conn.close()
    assert server.call("GET", base + "/q/statistics", headers=auth).json() == {"size": 1}
