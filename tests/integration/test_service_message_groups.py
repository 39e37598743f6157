"""Message groups over HTTP: ``POST .../messages?group=`` puts a message in its group (a bad
group, or a group with a delay, is 400), and both APIs' receives deliver a group's head only
and name the group."""

from __future__ import annotations

import json
import uuid
from urllib.parse import quote

from support.service_harness import start_test_server

JSON = {"Content-Type": "application/json"}


def test_http_puts_with_a_group_are_delivered_in_order_one_at_a_time(
    cassandra, queue_client, cassieq_options, tmp_path
):
    server = start_test_server(tmp_path, cassandra, cassieq_options)
    try:
        account = f"acct-{uuid.uuid4().hex[:10]}"
        key = server.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}", **JSON}
        base = f"/api/v1/accounts/{account}/queues"
        assert server.call("POST", base, json.dumps({"queueName": "q"}), auth).status == 201
        for body in ("a1", "a2"):
            r = server.call("POST", f"{base}/q/messages?group=acct-7", body, auth)
            assert r.status == 201, (r.status, r.body)
        bad = server.call(
            "POST", f"{base}/q/messages?group=g&initialInvisibilitySeconds=5", "x", auth
        )
        assert bad.status == 400 and "cannot be delayed" in bad.body.decode(), bad.body
        assert server.call("POST", f"{base}/q/messages?group=", "x", auth).status == 400

        first = server.call("GET", f"{base}/q/messages/next", headers=auth)
        assert first.status == 200 and first.json()["message"] == "a1"
        assert first.json()["group"] == "acct-7"
        assert server.call("GET", f"{base}/q/messages/next", headers=auth).status == 204
        receipt = quote(first.json()["popReceipt"], safe="")
        ack = server.call("DELETE", f"{base}/q/messages?popReceipt={receipt}", None, auth)
        assert ack.status == 204
        v2 = server.call(
            "GET", f"/api/v2/accounts/{account}/queues/q/messages?max=10", headers=auth
        )
        assert v2.status == 200, (v2.status, v2.body)
        assert [(m["message"], m["group"]) for m in v2.json()["messages"]] == [("a2", "acct-7")]
    finally:
        server.stop()
