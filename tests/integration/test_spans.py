"""OpenTelemetry spans from the SDK's in-memory exporter: a put is a PRODUCER span whose
context each message carries, a receive a CONSUMER span linked to the producer's span of each
message, an ack a CLIENT span; through the client, and through the HTTP service (real
uvicorn on a loopback socket, in this process so that its spans reach the exporter), where
each request is a SERVER span, a child of the caller's ``traceparent``, with the engine's
spans as its children. The service's access line in JSON is parsed too."""

from __future__ import annotations

import io
import json
import logging
import secrets
import threading
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from support.service_harness import free_port, request

from cassieq_spark.config import connection_from_options
from cassieq_spark.observability.logs import configure_logging
from cassieq_spark.observability.trace import TRACEPARENT
from cassieq_spark.observability.tracing import use_tracer_provider

pytestmark = [pytest.mark.integration, pytest.mark.fast]


@pytest.fixture
def tracing():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        yield provider, exporter
    finally:
        use_tracer_provider(None)
        provider.shutdown()


def _one(spans, name: str):
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _traceparent(span) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"


def test_put_get_and_ack_through_the_client_are_linked_spans(queue_client, queue_name, tracing):
    provider, exporter = tracing
    queue_client.create_queue(queue_name)
    with provider.get_tracer("test").start_as_current_span("job") as job:
        ids = queue_client.put_many(queue_name, ["a", "b"])
    got = queue_client.get_many(queue_name, 10)
    assert sorted(m.id for m in got) == sorted(ids)
    assert all(r.ok for r in queue_client.ack_many(queue_name, [m.pop_receipt for m in got]))
    spans = exporter.get_finished_spans()
    send = _one(spans, f"send {queue_name}")
    assert send.kind == SpanKind.PRODUCER and send.parent.span_id == job.get_span_context().span_id
    assert send.attributes["messaging.system"] == "cassieq"
    assert send.attributes["messaging.destination.name"] == queue_name
    assert send.attributes["messaging.batch.message_count"] == 2
    ids_of = {tuple(m.headers[TRACEPARENT].split("-")[1:3]) for m in got}
    assert ids_of == {(f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}")}
    receive = _one(spans, f"receive {queue_name}")
    assert receive.kind == SpanKind.CONSUMER
    assert [link.context.span_id for link in receive.links] == [send.context.span_id] * 2
    assert {link.attributes["messaging.message.id"] for link in receive.links} == {
        str(i) for i in ids
    }
    ack = _one(spans, f"ack {queue_name}")
    assert ack.kind == SpanKind.CLIENT
    assert ack.attributes["messaging.operation.type"] == "settle"
    assert ack.attributes["messaging.batch.message_count"] == 2


@pytest.fixture
def service_in_process(cassieq_options):
    import uvicorn

    from cassieq_spark.service.app import build_app
    from cassieq_spark.service.config import ServiceConfig
    from cassieq_spark.service.state import Service

    admin = secrets.token_urlsafe(24)
    port = free_port()
    config = ServiceConfig(http_port=port, secret=secrets.token_bytes(32), admin_key=admin)
    service = Service(config, connection_from_options(cassieq_options))
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(service),
            host="127.0.0.1",
            port=port,
            http="h11",
            lifespan="on",
            log_config=None,
            access_log=False,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield port, admin
    finally:
        server.should_exit = True
        thread.join(30)
        service.close()


def test_put_get_and_ack_through_the_service_are_spans_of_its_requests(service_in_process, tracing):
    port, admin = service_in_process
    provider, exporter = tracing
    account = f"acct-{secrets.token_hex(5)}"
    made = request(
        port,
        "POST",
        "/admin/api/v1/accounts",
        json.dumps(account),
        {"Authorization": f"Key {admin}", "Content-Type": "application/json"},
    )
    assert made.status in (200, 201), made.body
    key = made.json()["keys"]["primary"]
    out = io.StringIO()
    handler = configure_logging("json", logging.INFO, stream=out)
    try:
        with provider.get_tracer("test").start_as_current_span("caller") as caller:
            headers = {
                "Authorization": f"Key {key}",
                "Content-Type": "application/json",
                TRACEPARENT: _traceparent(caller),
                "X-Request-Id": "req-put-1",
            }
            base = f"/api/v2/accounts/{account}/queues"
            created = request(
                port,
                "POST",
                f"/api/v1/accounts/{account}/queues",
                json.dumps({"queueName": "q"}),
                headers,
            )
            assert created.status == 201, created.body
            put = request(
                port,
                "POST",
                base + "/q/messages",
                json.dumps({"messages": [{"message": "x"}]}),
                headers,
            )
            assert put.status == 200, put.body
            got = request(port, "GET", base + "/q/messages?max=5", None, headers).json()["messages"]
            assert len(got) == 1
            acked = request(
                port,
                "POST",
                base + "/q/messages/ack",
                json.dumps({"popReceipts": [got[0]["popReceipt"]]}),
                headers,
            )
            assert acked.status == 200
        # A server span ends, and the access line is logged, after the response is sent:
        # wait for the last request's.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            any(s.name.endswith("/messages/ack") for s in exporter.get_finished_spans())
            and "/messages/ack 200" in out.getvalue()
        ):
            time.sleep(0.05)
    finally:
        logging.getLogger().removeHandler(handler)
    spans = exporter.get_finished_spans()
    # the account was made before the caller's span: its request has no parent
    servers = [s for s in spans if s.kind == SpanKind.SERVER and "/queues" in s.name]
    assert {s.name for s in servers} >= {
        "POST /api/v2/accounts/{account}/queues/{queue}/messages",
        "GET /api/v2/accounts/{account}/queues/{queue}/messages",
        "POST /api/v2/accounts/{account}/queues/{queue}/messages/ack",
    }
    for s in servers:
        assert s.parent.span_id == caller.get_span_context().span_id
        assert s.attributes["http.response.status_code"] in (200, 201)
    by_name = {s.name: s for s in servers}
    # the engine's queue of the account's queue q
    send = _one(spans, f"send {account}.q")
    receive = _one(spans, f"receive {account}.q")
    ack = _one(spans, f"ack {account}.q")
    assert (
        send.parent.span_id
        == by_name["POST /api/v2/accounts/{account}/queues/{queue}/messages"].context.span_id
    )
    assert (
        receive.parent.span_id
        == by_name["GET /api/v2/accounts/{account}/queues/{queue}/messages"].context.span_id
    )
    assert (
        ack.parent.span_id
        == by_name["POST /api/v2/accounts/{account}/queues/{queue}/messages/ack"].context.span_id
    )
    assert [link.context.span_id for link in receive.links] == [send.context.span_id]
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    # (the admin request's line may land after the handler was set: it has its own id)
    mine = [x for x in lines if x.get("request_id") == "req-put-1"]
    # the engine's own line of the queue's creation, logged on a worker thread, carries them too
    made_q = [x for x in mine if x["logger"] == "cassieq_spark.engine.core.queues"]
    assert made_q and made_q[0]["account"] == account
    access = [x for x in mine if x["logger"] == "cassieq_spark.service.access"]
    assert [x["message"].split()[1:4] for x in access] == [
        ["POST", f"/api/v1/accounts/{account}/queues", "201"],
        ["POST", f"{base}/q/messages", "200"],
        ["GET", f"{base}/q/messages", "200"],
        ["POST", f"{base}/q/messages/ack", "200"],
    ]
    assert all(x["account"] == account and x["level"] == "INFO" for x in access)
    assert all({"timestamp", "level", "message"} <= set(x) for x in access)
