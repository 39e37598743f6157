"""purge: every message written so far is dropped, nothing written after the purge started is
lost (client and CLI, against the real Cassandra)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from support.queues import drain_messages

from cassieq_spark.engine.core.queues import get_queue
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.stream.consumer import StreamConsumer
from cassieq_spark.errors import QueueBusyError

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


def drain(client, queue) -> list[int]:
    return [m.id for m in drain_messages(client, queue)]


def test_purge_drops_every_kind_of_message_and_keeps_a_block_being_written(
    queue_client, queue_name
):
    queue_client.create_queue(queue_name, bucket_size=10)
    plain = queue_client.put_many(queue_name, [b"old"] * 25)
    delayed = queue_client.put_many(queue_name, [b"delayed"] * 2, delay=3)
    held = queue_client.get(queue_name, visibility_timeout=2)
    assert held is not None and held.id == plain[0]
    reports = []

    def purge_while_open(**ctx):  # the late block is reserved, its rows not written yet
        if not reports:
            reports.append(queue_client.purge(queue_name))

    faults.on("writes.before_write", purge_while_open)
    try:
        late = queue_client.put_many(queue_name, [b"late"] * 3)
    finally:
        faults.reset()
    (report,) = reports
    assert report.purged == len(plain) + len(delayed)
    assert report.through_id == late[0] and report.next_id == late[-1] + 1
    assert not queue_client.ack(queue_name, held.pop_receipt)  # it was purged
    time.sleep(3.5)  # the delayed ones and the held one come due: their timers find them acked
    assert drain(queue_client, queue_name) == late
    st = queue_client.stats(queue_name)
    assert st["dropped"] == 27 and st["acked"] == 3
    assert (st["backlog"], st["in_flight"], st["delayed"]) == (0, 0, 0)


def test_purge_with_a_producer_running_loses_nothing_written_after(queue_client, queue_name):
    queue_client.create_queue(queue_name, bucket_size=20)
    queue_client.put_many(queue_name, [b"before"] * 30)
    put: list[int] = []
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            put.append(queue_client.put(queue_name, b"during"))

    t = threading.Thread(target=produce)
    t.start()
    try:
        time.sleep(0.3)
        report = queue_client.purge(queue_name)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(30)
    after = queue_client.put_many(queue_name, [b"after"] * 3)
    delivered = drain(queue_client, queue_name)
    # Below the purge line everything is gone; at and above it everything comes, once.
    everything = list(range(30)) + put + after
    assert delivered == sorted(i for i in everything if i >= report.through_id)
    assert report.purged == sum(1 for i in everything if i < report.through_id)
    assert set(after) <= set(delivered)


def test_purge_is_refused_while_a_stream_consumes_the_queue(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"x"] * 2)
    st = StreamConsumer(
        queue_client.conn, get_queue(queue_client.conn, queue_name), "stream:p", 5.0
    )
    st.initial()  # takes the lease
    try:
        with pytest.raises(QueueBusyError, match="streaming query 'p'"):
            queue_client.purge(queue_name)
    finally:
        st.lease.release()
    assert queue_client.purge(queue_name).purged == 2


def test_purge_command(run, queue_client, queue_name):  # noqa: F811
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"x"] * 4)
    r = run("purge", queue_name)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "queue": queue_name,
        "purged": 4,
        "through_id": 4,
        "next_id": 4,
    }
    assert queue_client.get(queue_name) is None
    missing = run("purge", "no_such_queue_here")
    assert missing.returncode == 4 and "does not exist" in missing.stderr
