"""A streaming query that ends gives its consumer lease back at once, however it ends: an
``AvailableNow`` run that is done, ``query.stop()``, a batch that fails. Spark ends the reader's
Python process with SIGTERM, before or while the runner calls the reader's ``stop()``
(``cassieq_spark/spark/runner_exit.py`` routes the signal through ``stop()``). The lease timeout here is two minutes, so a lease
that only lapsed would keep the queue busy far longer than the test waits. Real Cassandra,
real local Spark."""

from __future__ import annotations

import time

import pytest
from support.stream import Collector, start, wait_for

from cassieq_spark.errors import QueueBusyError

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LEASE = 120  # s: far beyond GIVEN_BACK_WITHIN
GIVEN_BACK_WITHIN = 10.0  # s from the query's end to a client's get that is not refused
TIMEOUT = 120


def _client_gets_at_once(queue_client, name: str) -> float:
    """Seconds until a client get on ``name`` is no longer refused as the stream's (fails the
    test past GIVEN_BACK_WITHIN); the message it got is acked."""
    started = time.monotonic()
    while True:
        try:
            m = queue_client.get(name)
        except QueueBusyError:
            waited = time.monotonic() - started
            assert waited < GIVEN_BACK_WITHIN, f"queue {name} still held {waited:.1f} s later"
            time.sleep(0.2)
            continue
        if m is not None:
            assert queue_client.ack(name, m.pop_receipt)
        assert queue_client.stats(name)["consumer"] is None
        return time.monotonic() - started


def test_an_available_now_run_a_stopped_query_and_a_failed_one_give_the_lease_back(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=10)
    opts = {**cassieq_options, "queue": queue_name, "leaseTimeout": str(LEASE)}

    # AvailableNow, done
    queue_client.put_many(queue_name, [b"a"] * 3)
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck-once", {"availableNow": True})
    assert q.awaitTermination(TIMEOUT) and q.exception() is None, q.exception()
    assert len(c.ids) == 3
    queue_client.put_many(queue_name, [b"b"])
    done = _client_gets_at_once(queue_client, queue_name)

    # query.stop() of a running query
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck-stop", {"processingTime": "500 milliseconds"})
    try:
        wait_for(lambda: queue_client.stats(queue_name)["consumer"], TIMEOUT, "the lease", q)
    finally:
        q.stop()
    queue_client.put_many(queue_name, [b"c"])
    stopped = _client_gets_at_once(queue_client, queue_name)

    # a failed batch
    queue_client.put_many(queue_name, [b"d"] * 2)
    failing = Collector(fail_on_batch=0)
    q = start(sspark, opts, failing, tmp_path / "ck-fail", {"availableNow": True})
    with pytest.raises(Exception, match="fails on purpose"):
        q.awaitTermination(TIMEOUT)
    failed = _client_gets_at_once(queue_client, queue_name)
    print(
        f"\nlease free after: AvailableNow {done:.1f} s, stop() {stopped:.1f} s, failed {failed:.1f} s"
    )
