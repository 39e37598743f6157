"""A W3C ``traceparent`` travels with a message from producer to consumer unchanged: put by
the client, it comes out of the Spark source's ``headers`` column and of the client's ``get``;
written by the Spark sink in the ``headers`` column, it comes out of ``get``. With the
OpenTelemetry API installed, a put made inside a span carries that span's context, and a
traceparent the producer set wins over it. Real Cassandra, real local Spark."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from support.stream import Collector, start

from cassieq_spark.observability import TRACEPARENT, trace_context_of
from cassieq_spark.spark import register

pytestmark = [pytest.mark.integration, pytest.mark.spark]

GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


def in_span():
    """A current span with a known context (the API alone: no SDK needed)."""
    ctx = SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1))
    return trace.use_span(NonRecordingSpan(ctx))


def test_a_traceparent_comes_out_of_the_source_and_the_client_unchanged(
    spark, queue_client, queue_name, cassieq_options, tmp_path
):
    register(spark)
    q = queue_client
    q.create_queue(queue_name)
    given = q.put(queue_name, "given", headers={TRACEPARENT: GIVEN, "k": "v"})
    with in_span():
        injected = q.put(queue_name, "injected")
        kept = q.put(queue_name, "kept", headers={TRACEPARENT: GIVEN})
    plain = q.put(queue_name, "plain")  # outside a span: nothing added
    span_header = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"

    expected = {
        given: {TRACEPARENT: GIVEN, "k": "v"},
        injected: {TRACEPARENT: span_header},
        kept: {TRACEPARENT: GIVEN},
        plain: {},
    }
    c = Collector()
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-trace"}
    query = start(spark, opts, c, tmp_path / "ck", {"availableNow": True})
    assert query.awaitTermination(180) and query.exception() is None
    from_source = {r.id: dict(r.headers or {}) for r in c.rows}
    assert from_source == expected

    # the same messages through the client (the stream acked them: put them again)
    other = f"{queue_name}_c"
    q.create_queue(other)
    q.put(other, "given", headers={TRACEPARENT: GIVEN})
    m = q.get(other)
    assert m is not None and m.headers == {TRACEPARENT: GIVEN}
    parent = trace.get_current_span(trace_context_of(m.headers)).get_span_context()
    assert (f"{parent.trace_id:032x}", f"{parent.span_id:016x}") == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    )


def test_a_traceparent_written_by_the_sink_comes_out_of_get(
    spark, queue_client, queue_name, cassieq_options
):
    register(spark)
    queue_client.create_queue(queue_name)
    df = spark.createDataFrame(
        [("a", {TRACEPARENT: GIVEN}), ("b", None)], "value string, headers map<string,string>"
    )
    writer = df.write.format("cassieq").mode("append")
    for k, v in {**cassieq_options, "queue": queue_name}.items():
        writer = writer.option(k, v)
    writer.save()
    got = {m.payload: m.headers for m in queue_client.get_many(queue_name, 10)}
    assert got == {b"a": {TRACEPARENT: GIVEN}, b"b": {}}
