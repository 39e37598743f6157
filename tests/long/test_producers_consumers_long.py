"""Four producer and four consumer processes on one queue for 20,000 messages (about seven
minutes here): every id acked exactly once, no message held by two consumers at once. The same
workload at 2,000 messages runs in `make test` (tests/integration/test_engine_concurrency.py)."""

from __future__ import annotations

from support.concurrency import check_producers_and_consumers


def test_four_producers_four_consumers_exactly_once_over_20000_messages(
    cassieq_options, queue_client, queue_name
):
    check_producers_and_consumers(cassieq_options, queue_client, queue_name, 20_000)
