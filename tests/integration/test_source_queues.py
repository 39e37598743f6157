"""Several queues in one query (issue 16, item 4): options ``queues`` (a list) and
``queuePattern`` (every queue whose name matches, new ones picked up at the next trigger), one
offset per queue, the ``queue`` column telling rows apart, each queue acked on commit and
leased on its own. Against the real Cassandra and a real local Spark."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from chispa import assert_df_equality
from support.stream import Collector, start, wait_for

from cassieq_spark.errors import QueueBusyError
from cassieq_spark.spark import lag_listener

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 180


def _offset(progress_source, key: str) -> dict:
    value = progress_source[key]
    return json.loads(value) if isinstance(value, str) else value


def _pairs(rows) -> list[tuple[str, str]]:
    return [(r.queue, bytes(r.value).decode()) for r in rows]


def test_queues_round_trip_with_routing_and_a_failed_batch_is_exactly_once(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    """The sink routes rows to two queues by their ``queue`` column; one query reads both. Its
    second batch fails once: after the restart every message is in exactly one committed
    batch, under the queue it was routed to, and both queues are acked whole."""
    a, b = queue_name + "_a", queue_name + "_b"
    for q in (a, b):
        queue_client.create_queue(q, bucket_size=10)
    rows = [(f"m{i}", a if i % 3 else b) for i in range(60)]
    (
        sspark.createDataFrame(rows, "value string, queue string")
        .write.format("cassieq")
        .options(**cassieq_options)
        .mode("append")
        .save()
    )
    opts = {
        **cassieq_options,
        "queues": f"{a},{b}",
        "maxMessagesPerTrigger": 25,
        "consumerId": queue_name,  # the restart takes its own leases over at once
    }
    ck = tmp_path / "ck"
    first = Collector(fail_on_batch=1)
    q = start(sspark, opts, first, ck, {"availableNow": True})
    with pytest.raises(Exception, match="fails on purpose in batch 1"):
        q.awaitTermination(TIMEOUT)
    assert [b for b, ids in first.batches.items() if ids] == [0]
    after_failure = {n: queue_client.stats(n)["acked"] for n in (a, b)}
    assert sum(after_failure.values()) == 25  # batch 0 only: the failed batch is not acked

    again = Collector()
    q = start(sspark, opts, again, ck, {"availableNow": True})
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    delivered = _pairs(first.rows + again.rows)
    assert Counter(delivered).most_common(1)[0][1] == 1  # nothing twice
    schema = "queue string, value string"
    assert_df_equality(
        sspark.createDataFrame(delivered, schema),
        sspark.createDataFrame([(d, v) for v, d in rows], schema),
        ignore_row_order=True,
    )
    # one offset per queue in the checkpoint, each at its queue's end
    end = _offset([p for p in q.recentProgress if p["numInputRows"]][-1]["sources"][0], "endOffset")
    assert sorted(end["queues"]) == [a, b]
    for n in (a, b):
        st = queue_client.stats(n)
        want = sum(1 for _, d in rows if d == n)
        assert (st["acked"], st["backlog"]) == (want, 0), n
        assert end["queues"][n]["id"] == st["reader_pointer"], n


def test_row_cap_is_shared_so_that_no_queue_waits(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    names = [f"{queue_name}_{i}" for i in range(3)]
    sizes = dict(zip(names, (20, 20, 5), strict=True))
    for n, size in sizes.items():
        queue_client.create_queue(n)
        queue_client.put_many(n, [f"{n}-{i}".encode() for i in range(size)])
    c = QueuesPerBatch()
    opts = {**cassieq_options, "queues": ",".join(names), "maxMessagesPerTrigger": 10}
    q = start(sspark, opts, c, tmp_path / "ck", {"availableNow": True})
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    got = Counter(r.queue for r in c.rows)
    assert got == Counter(sizes) and len(c.rows) == len(set(_pairs(c.rows)))
    per_batch = [c.queues[bid] for bid in sorted(c.queues) if c.queues[bid]]
    assert max(sum(b.values()) for b in per_batch) <= 10
    assert set(per_batch[0]) == set(names)  # the first batch already takes from every queue
    for n in names:
        assert queue_client.stats(n)["backlog"] == 0


class QueuesPerBatch(Collector):
    """Also counts each batch's rows per queue."""

    def __init__(self):
        super().__init__()
        self.queues: dict[int, Counter] = {}

    def __call__(self, df, batch_id):
        rows = df.collect()
        super().__call__(df, batch_id)
        self.queues[batch_id] = Counter(r.queue for r in rows)


def test_pattern_picks_up_new_queues_leases_each_and_drops_deleted_ones(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    a, b = queue_name + "_a", queue_name + "_b"
    other = queue_name + "x"  # does not match: never read, never leased
    for n in (a, other):
        queue_client.create_queue(n)
    first = queue_client.put_many(a, [b"a0", b"a1", b"a2"])
    queue_client.put_many(other, [b"o0"])
    lag = lag_listener()
    sspark.streams.addListener(lag)
    c = Collector()
    opts = {**cassieq_options, "queuePattern": f"{queue_name}_.*", "consumerId": queue_name}
    q = start(sspark, opts, c, tmp_path / "ck", {"processingTime": "300 milliseconds"})
    try:
        wait_for(lambda: len(c.rows) == 3, TIMEOUT, "queue a's messages", q)
        queue_client.create_queue(b)
        later = queue_client.put_many(b, [b"b0", b"b1"])
        wait_for(lambda: len(c.rows) == 5, TIMEOUT, "the new queue's messages", q)
        # each matched queue is leased by the query; the unmatched one is free
        for n in (a, b):
            with pytest.raises(QueueBusyError):
                queue_client.get(n)
        got = queue_client.get(other)
        assert got is not None and got.payload == b"o0"
        queue_client.ack(other, got.pop_receipt)
        wait_for(lambda: b in lag.latest and a in lag.latest, 30, "lag of both queues", q)
        assert lag.latest[b].behind == 0
        # a queue deleted under the query is dropped; the others go on
        queue_client.delete_queue(a)
        more = queue_client.put_many(b, [b"b2"])
        wait_for(lambda: len(c.rows) == 6, TIMEOUT, "the message after the delete", q)
        # created again, the queue is read from its new beginning
        queue_client.create_queue(a)
        again = queue_client.put_many(a, [b"a-again"])
        wait_for(lambda: len(c.rows) == 7, TIMEOUT, "the queue created again", q)
        # acked at the next trigger, once Spark committed the batch
        wait_for(lambda: queue_client.stats(b)["backlog"] == 0, 30, "b acked", q)
        assert q.exception() is None and q.isActive
    finally:
        q.stop()
        sspark.streams.removeListener(lag)
    assert sorted((r.queue, r.id) for r in c.rows) == sorted(
        [(a, i) for i in first + again] + [(b, i) for i in later + more]
    )
    assert [bytes(r.value) for r in c.rows if r.queue == a][-1] == b"a-again"


def test_batch_read_of_several_queues(sspark, queue_client, queue_name, cassieq_options):
    a, b = queue_name + "_a", queue_name + "_b"
    for n in (a, b):
        queue_client.create_queue(n)
        queue_client.put_many(n, [f"{n}-{i}".encode() for i in range(4)])
    for options in ({"queues": f"{a},{b}"}, {"queuePattern": f"{queue_name}_[ab]"}):
        df = sspark.read.format("cassieq").options(**cassieq_options, **options).load()
        assert Counter(r.queue for r in df.collect()) == {a: 4, b: 4}, options
    none = sspark.read.format("cassieq").options(
        **cassieq_options, queuePattern=f"{queue_name}_nothing.*"
    )
    assert none.load().count() == 0
    assert queue_client.stats(a)["backlog"] == 4  # a batch read acks nothing
