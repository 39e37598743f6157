"""The CassieQ REST API v1 over real HTTP (a ``cassieq serve`` process on a loopback port,
the real Cassandra): every route and status code of the spec, its recorded exchanges
replayed (status and body shape), and the original's bugs fixed as docs/service.md lists."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from support.service_harness import Server, start_test_server

DEFINITION_TYPES = {
    "accountName": str,
    "queueName": str,
    "bucketSize": int,
    "maxDeliveryCount": int,
    "status": str,
    "version": int,
    "repairWorkerPollFrequencySeconds": int,
    "repairWorkerTombstonedBucketTimeoutSeconds": int,
    "deleteBucketsAfterFinalization": bool,
    "queueStatsId": str,
    "dlqName": (str, type(None)),
    "strictFifo": bool,
    "id": str,
}


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, tmp_path_factory):
    s = start_test_server(
        tmp_path_factory.mktemp("service"),
        cassandra,
        cassieq_options,
    )
    yield s
    s.stop()


class Account:
    def __init__(self, server: Server, name: str, keys: dict[str, str]):
        self.server, self.name, self.keys = server, name, keys
        self.auth = {"Authorization": f"Key {keys['primary']}"}

    def url(self, tail: str = "") -> str:
        return f"/api/v1/accounts/{self.name}/queues{tail}"

    def call(self, method: str, tail: str = "", body=None, headers=None):
        return self.server.call(method, self.url(tail), body, {**self.auth, **(headers or {})})

    def create(self, name: str, **settings) -> None:
        r = self.call("POST", "", json.dumps({"queueName": name, **settings}), JSON)
        assert r.status == 201, r


JSON = {"Content-Type": "application/json"}


def new_account(server: Server) -> Account:
    name = f"acct-{uuid.uuid4().hex[:10]}"
    r = server.admin("POST", "/accounts", name)
    assert r.status == 201, r
    body = r.json()
    assert body["accountName"] == name and set(body["keys"]) == {"primary", "secondary"}
    return Account(server, name, body["keys"])


@pytest.fixture
def acct(server) -> Account:
    return new_account(server)


def assert_queue_404(r, operation: str, queue: str) -> None:
    assert r.status == 404
    assert r.json() == {
        "reason": "NotFound",
        "operation": operation,
        "message": f"The requested queue '{queue}' was not found.",
        "queueName": queue,
    }


# -- recorded exchanges (the Ruby client's cassettes, spec section 1) -----------------------------


def test_an_empty_account_lists_no_queues_as_the_key_auth_cassette(acct):
    r = acct.call("GET")
    assert (r.status, r.json(), r.headers["content-type"]) == (200, [], "application/json")


def test_create_with_error_if_exists_answers_201_with_no_body_and_no_content_type(acct):
    r = acct.call("POST", "?errorIfExists=true", '{"queueName":"test_queue"}', JSON)
    assert r.status == 201 and r.body == b"" and "content-type" not in r.headers


def test_the_queue_definition_has_every_field_of_the_recorded_one(acct):
    acct.create("test_queue")
    r = acct.call("GET", "/test_queue")
    assert r.status == 200
    body = r.json()
    assert list(body) == list(DEFINITION_TYPES)
    for name, kind in DEFINITION_TYPES.items():
        assert isinstance(body[name], kind), (name, body[name])
    assert body["accountName"] == acct.name and body["queueName"] == "test_queue"
    assert body["status"] == "Active" and body["maxDeliveryCount"] == 5
    assert body["id"] == f"{acct.name}:test_queue_v0"
    assert body["queueStatsId"].endswith(f"_{acct.name}:test_queue_v0")


def test_statistics_count_one_put_as_the_statistics_cassette(acct):
    acct.create("q")
    assert acct.call("POST", "/q/messages", "Test message!", JSON).status == 201
    r = acct.call("GET", "/q/statistics")
    assert (r.status, r.json()) == (200, {"size": 1})


def test_put_get_update_ack_as_the_message_cassettes(acct):
    """ack_message.yml and edit_message.yml: put 201 empty; next 200 with the four fields and
    deliveryCount 0; update 200 with a new receipt and the same tag; ack with it 204."""
    acct.create("q")
    put = acct.call("POST", "/q/messages", "Test message!", JSON)
    assert (put.status, put.body) == (201, b"") and "content-type" not in put.headers
    got = acct.call("GET", "/q/messages/next")
    assert got.status == 200
    m = got.json()
    assert set(m) == {"popReceipt", "message", "deliveryCount", "messageTag"}
    assert (m["message"], m["deliveryCount"]) == ("Test message!", 0)
    assert isinstance(m["messageTag"], str) and len(m["messageTag"]) == 6
    upd = acct.call(
        "PUT",
        f"/q/messages?popReceipt={m['popReceipt']}",
        '{"message":"Tacos tonight!","newInvisibilitySeconds":30}',
        JSON,
    )
    assert upd.status == 200
    new = upd.json()
    assert set(new) == {"popReceipt", "messageTag"}
    assert new["messageTag"] == m["messageTag"] and new["popReceipt"] != m["popReceipt"]
    stale = acct.call("PUT", f"/q/messages?popReceipt={m['popReceipt']}", "{}", JSON)
    assert (stale.status, stale.json()) == (
        409,
        {"reason": "Conflict", "operation": "UpdateMessage", "message": "Pop receipt is stale."},
    )
    old_ack = acct.call("DELETE", f"/q/messages?popReceipt={m['popReceipt']}")
    assert old_ack.status == 409
    assert old_ack.json() == {
        "reason": "Conflict",
        "operation": "AckMessage",
        "message": "The message is already being reprocessed.",
    }
    ack = acct.call("DELETE", f"/q/messages?popReceipt={new['popReceipt']}")
    assert (ack.status, ack.body) == (204, b"")
    assert acct.call("DELETE", f"/q/messages?popReceipt={new['popReceipt']}").status == 409
    assert acct.call("GET", "/q/statistics").json() == {"size": 0}


def test_no_credentials_is_401_as_the_no_auth_cassette(server, acct):
    r = server.call("GET", acct.url())
    assert (r.status, r.json()) == (401, {"code": 401, "message": "HTTP 401 Unauthorized"})
    assert "www-authenticate" not in r.headers


# -- every route and status code -----------------------------------------------------------------


def test_create_twice_is_200_and_409_with_error_if_exists(acct):
    acct.create("q")
    again = acct.call("POST", "", '{"queueName":"q"}', JSON)
    assert (again.status, again.body) == (200, b"")
    conflict = acct.call("POST", "?errorIfExists=TRUE", '{"queueName":"q"}', JSON)
    assert (conflict.status, conflict.json()) == (
        409,
        {
            "reason": "Conflict",
            "operation": "CreateQueue",
            "message": "A queue named 'q' already exists.",
        },
    )


def test_create_settings_map_onto_the_engine_queue(acct, queue_client):
    acct.create("dead")
    acct.create(
        "q",
        bucketSize=7,
        maxDeliveryCount=3,
        repairWorkerBucketFinalizeTimeSeconds=20,
        dlqName="dead",
    )
    info = queue_client.get_queue(f"{acct.name}.q")
    assert (info.bucket_size, info.max_delivery_count, info.repair_timeout) == (7, 3, 20.0)
    assert info.dead_letter_queue == f"{acct.name}.dead"
    d = acct.call("GET", "/q").json()
    assert (d["bucketSize"], d["maxDeliveryCount"], d["dlqName"]) == (7, 3, "dead")
    assert d["repairWorkerTombstonedBucketTimeoutSeconds"] == 20


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        pytest.param("", 422, "The request entity was empty", id="empty-body"),
        pytest.param("{}", 422, "queueName", id="no-queue-name"),
        pytest.param('{"queueName":"bad!name"}', 422, "bad!name", id="bad-name"),
        pytest.param('{"queueName":"q","bucketSize":0}', 422, "bucketSize", id="bucket-size-0"),
        pytest.param('{"queueName":"q","bucketSize":-3}', 422, "bucketSize", id="negative"),
        pytest.param('{"queueName":"q","bucketSize":"20"}', 422, "bucketSize", id="string-number"),
        pytest.param(
            '{"queueName":"q","maxDeliveryCount":true}', 422, "maxDeliveryCount", id="bool"
        ),
        pytest.param('{"queueName":"q","dlqName":"nope"}', 422, "dlqName", id="missing-dlq"),
        pytest.param(
            '{"queueName":"q","deleteBucketsAfterFinalize":"yes"}', 422, "delete", id="bad-bool"
        ),
        pytest.param("[1,2]", 422, "JSON object", id="not-an-object"),
    ],
)
def test_create_refuses_bad_options_with_an_errors_body(acct, body, status, fragment):
    r = acct.call("POST", "", body, JSON)
    assert r.status == status, r
    errors = r.json()["errors"]
    assert len(errors) == 1 and fragment in errors[0]
    assert acct.call("GET").json() == []  # nothing was created


def test_create_with_unparsable_json_is_400_unable_to_process_json(acct):
    r = acct.call("POST", "", "{queueName:'x'", JSON)
    assert (r.status, r.json()) == (400, {"code": 400, "message": "Unable to process JSON"})


def test_every_per_queue_route_answers_404_for_a_missing_queue(acct):
    assert_queue_404(acct.call("GET", "/nope"), "getQueueDefinition", "nope")
    assert_queue_404(acct.call("GET", "/nope/statistics"), "getQueueStatistics", "nope")
    assert_queue_404(acct.call("DELETE", "/nope"), "Delete", "nope")
    assert_queue_404(acct.call("POST", "/nope/messages", "x"), "putMessage", "nope")
    assert_queue_404(acct.call("GET", "/nope/messages/next"), "getMessage", "nope")
    assert_queue_404(
        acct.call("PUT", "/nope/messages?popReceipt=x", "{}", JSON), "updateMessage", "nope"
    )
    assert_queue_404(acct.call("DELETE", "/nope/messages?popReceipt=x"), "ackMessage", "nope")


def test_delete_queue_is_200_empty_then_404_and_the_name_can_be_created_again(acct):
    acct.create("q")
    acct.call("POST", "/q/messages", "old")
    r = acct.call("DELETE", "/q")
    assert (r.status, r.body) == (200, b"")
    assert_queue_404(acct.call("GET", "/q"), "getQueueDefinition", "q")
    acct.create("q")
    assert acct.call("GET", "/q/statistics").json() == {"size": 0}
    assert acct.call("GET", "/q/messages/next").status == 204


def test_next_on_an_empty_queue_is_204_with_no_body(acct):
    acct.create("q")
    r = acct.call("GET", "/q/messages/next")
    assert (r.status, r.body) == (204, b"") and "content-type" not in r.headers


def test_initial_invisibility_delays_a_message(acct):
    acct.create("q")
    assert acct.call("POST", "/q/messages?initialInvisibilitySeconds=2", "later").status == 201
    assert acct.call("GET", "/q/messages/next").status == 204
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        r = acct.call("GET", "/q/messages/next")
        if r.status == 200:
            assert r.json()["message"] == "later"
            return
        time.sleep(0.5)
    pytest.fail("the delayed message never came")


def test_the_deprecated_misspelt_parameter_is_400(acct):
    acct.create("q")
    r = acct.call("POST", "/q/messages?initialInvisiblityTime=1", "x")
    assert r.status == 400 and r.json()["operation"] == "putMessage"
    assert acct.call("GET", "/q/statistics").json() == {"size": 0}


def test_the_body_is_stored_verbatim_whatever_its_content_type(acct):
    acct.create("q")
    for body in ('"json string"', "", "plain ünïcode"):
        assert acct.call("POST", "/q/messages", body, {"Content-Type": "text/plain"}).status == 201
    got = sorted(acct.call("GET", "/q/messages/next").json()["message"] for _ in range(3))
    assert got == sorted(['"json string"', "", "plain ünïcode"])


def test_update_with_zero_invisibility_releases_the_message_and_counts_a_redelivery(acct):
    acct.create("q")
    acct.call("POST", "/q/messages", "m0")
    m = acct.call("GET", "/q/messages/next?invisibilityTimeSeconds=60").json()
    assert acct.call("GET", "/q/messages/next").status == 204
    upd = acct.call("PUT", f"/q/messages?popReceipt={m['popReceipt']}", "{}", JSON)
    assert upd.status == 200
    again = acct.call("GET", "/q/messages/next").json()
    assert (again["message"], again["deliveryCount"]) == ("m0", 1)


def test_next_with_zero_invisibility_leaves_the_message_visible_at_once(acct):
    """As the original: each such get delivers the message and counts it; the next get sees it
    again; the last receipt acks it."""
    acct.create("q")
    acct.call("POST", "/q/messages", "m0")
    first = acct.call("GET", "/q/messages/next?invisibilityTimeSeconds=0")
    assert first.status == 200 and first.json()["deliveryCount"] == 0, first
    again = acct.call("GET", "/q/messages/next?invisibilityTimeSeconds=0").json()
    assert (again["message"], again["deliveryCount"]) == ("m0", 1)
    assert again["messageTag"] == first.json()["messageTag"]
    stale = acct.call("DELETE", f"/q/messages?popReceipt={first.json()['popReceipt']}")
    assert stale.status == 409
    assert acct.call("DELETE", f"/q/messages?popReceipt={again['popReceipt']}").status == 204
    assert acct.call("GET", "/q/messages/next?invisibilityTimeSeconds=0").status == 204


def test_update_without_a_body_is_422_and_without_a_receipt_400(acct):
    acct.create("q")
    acct.call("POST", "/q/messages", "m0")
    m = acct.call("GET", "/q/messages/next").json()
    r = acct.call("PUT", f"/q/messages?popReceipt={m['popReceipt']}")
    assert (r.status, r.json()) == (422, {"errors": ["The request entity was empty"]})
    r = acct.call("DELETE", "/q/messages")
    assert (r.status, r.json()) == (400, {"errors": ["query param popReceipt may not be null"]})


def test_a_message_is_delivered_at_most_max_delivery_count_times_then_dead_lettered(acct):
    """The original dropped such messages (its dlqName was ignored): here they reach the DLQ."""
    acct.create("dlq")
    acct.create("q", maxDeliveryCount=2, dlqName="dlq")
    acct.call("POST", "/q/messages", "poison")
    seen = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = acct.call("GET", "/q/messages/next?invisibilityTimeSeconds=1")
        if r.status == 200:
            seen += 1
            assert r.json()["deliveryCount"] == seen - 1
        d = acct.call("GET", "/dlq/messages/next")
        if d.status == 200:
            assert d.json()["message"] == "poison"
            break
        time.sleep(0.3)
    else:
        pytest.fail("the message never reached the dead-letter queue")
    assert seen == 2


def test_an_http_queue_is_the_engine_queue_account_dot_name(acct, queue_client):
    acct.create("shared")
    queue_client.put(f"{acct.name}.shared", b"from python")
    m = acct.call("GET", "/shared/messages/next").json()
    assert m["message"] == "from python"
    acct.call("POST", "/shared/messages", "from http")
    got = queue_client.get(f"{acct.name}.shared")
    assert got is not None and got.payload == b"from http"
    assert queue_client.ack(f"{acct.name}.shared", got.pop_receipt)


def test_an_update_with_a_message_replaces_the_text_the_next_delivery_sees(acct):
    acct.create("q")
    acct.call("POST", "/q/messages", "before")
    m = acct.call("GET", "/q/messages/next").json()
    body = '{"message":"after","newInvisibilitySeconds":0}'
    assert acct.call("PUT", f"/q/messages?popReceipt={m['popReceipt']}", body, JSON).status == 200
    again = acct.call("GET", "/q/messages/next").json()
    assert (again["message"], again["messageTag"]) == ("after", m["messageTag"])
