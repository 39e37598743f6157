"""The threaded worker and handlers that cannot finish a message: one that returns a
coroutine (it never ran) is a failure, never an ack; one that raises ``SystemExit`` stops the
worker, releases its message and is raised by ``run()``. Real Cassandra."""

from __future__ import annotations

import threading

import pytest

from cassieq_spark.worker import Worker

pytestmark = [pytest.mark.integration]


def test_a_handler_that_returns_a_coroutine_has_its_messages_failed_not_acked(
    queue_client, queue_name
):
    dlq = f"{queue_name}_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(queue_name, max_delivery_count=1, dead_letter_queue=dlq)
    queue_client.put_many(queue_name, [b"a", b"b"])
    ran: list[bytes] = []

    async def body(m) -> None:
        ran.append(m.payload)

    report = Worker(
        queue_client,
        queue_name,
        lambda m: body(m),
        wait=0,
        stop_when_empty=True,
        handle_signals=False,
    ).run()
    assert (report.acked, report.dead_lettered, ran) == (0, 2, [])
    assert queue_client.stats(queue_name)["acked"] == 0


def test_a_handler_raising_system_exit_stops_the_worker_and_releases_its_message(
    queue_client, queue_name
):
    queue_client.create_queue(queue_name, visibility_timeout=30)
    queue_client.put_many(queue_name, [b"a", b"b"])
    outcome: list[object] = []

    def handler(m) -> None:
        raise SystemExit(3)

    worker = Worker(
        queue_client,
        queue_name,
        handler,
        concurrency=1,
        wait=0,
        stop_when_empty=True,
        handle_signals=False,
    )

    def run() -> None:
        try:
            outcome.append(worker.run())
        except SystemExit as exc:
            outcome.append(exc.code)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the worker hung"
    assert outcome == [3]
    assert worker.report.released == 1
    s = queue_client.stats(queue_name)
    assert (s["in_flight"], s["acked"]) == (0, 0), s
    assert len(queue_client.peek(queue_name)) == 2
