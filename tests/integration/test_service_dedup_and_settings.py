"""The HTTP service's v2 put with deduplication ids (``POST .../messages``) and the change of a
queue's settings (``PATCH .../queues/{queue}``), over real HTTP against the real Cassandra."""

from __future__ import annotations

import json
import uuid

import pytest

JSON = {"Content-Type": "application/json"}


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


def test_a_put_retried_with_its_dedup_ids_enqueues_once(acct):
    assert acct("POST", "", {"queueName": "q"}, version=1).status == 201
    batch = {
        "messages": [
            {"message": "a", "dedupId": "a-1", "headers": {"k": "v"}},
            {"message": "AP8=", "encoding": "base64"},
        ]
    }
    first = acct("POST", "/q/messages", batch)
    assert first.status == 200, first.body
    again = acct("POST", "/q/messages", {"messages": [batch["messages"][0]]})
    assert again.json()["ids"] == first.json()["ids"][:1]
    assert len(first.json()["messageTags"]) == 2
    got = acct("GET", "/q/messages?max=10").json()["messages"]
    assert sorted((m["message"], m["encoding"]) for m in got) == [
        ("AP8=", "base64"),
        ("a", "utf-8"),
    ]
    bad = acct("POST", "/q/messages", {"messages": [{"message": "x", "dedupId": "has space"}]})
    assert bad.status == 422 and "messages[0].dedupId must be 1-128 printable" in bad.body.decode()
    bad = acct("POST", "/q/messages", {"messages": [{"message": "x", "dedup": "a"}]})
    assert bad.status == 422 and "unknown field 'dedup'" in bad.body.decode()


def test_patch_changes_the_settings_of_a_queue_in_use(acct):
    for q in ("q", "dlq"):
        assert acct("POST", "", {"queueName": q}, version=1).status == 201
    r = acct(
        "PATCH", "/q", {"visibilityTimeoutSeconds": 5, "dlqName": "dlq", "maxDeliveryCount": 2}
    )
    assert r.status == 200, r.body
    got = r.json()
    assert (got["visibilityTimeoutSeconds"], got["dlqName"], got["maxDeliveryCount"]) == (
        5.0,
        "dlq",
        2,
    )
    assert got["settingsVersion"] == 1 and got["queueName"] == "q"
    r = acct("PATCH", "/q", {"dlqName": None})
    assert r.json()["dlqName"] is None and r.json()["visibilityTimeoutSeconds"] == 5.0
    for body, words in (
        ({"bucketSize": 3}, "setting 'bucketSize' cannot be changed"),
        ({"dlqName": "nowhere"}, "no such queue"),
        ({"maxDeliveryCount": 0}, "max delivery count"),
        ({}, "no setting to change"),
    ):
        r = acct("PATCH", "/q", body)
        assert r.status in (400, 422) and words in r.body.decode(), (body, r.body)
    assert acct("PATCH", "/missing", {"maxDeliveryCount": 3}).status == 404
