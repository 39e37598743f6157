"""Four producer and four consumer processes on one queue, 2,000 messages: every id acked exactly
once, no message held by two consumers at once (the workload and its checks are in
tests/support/concurrency.py; 20,000 messages in tests/long/test_producers_consumers_long.py)."""

from __future__ import annotations

import pytest
from support.concurrency import check_producers_and_consumers

pytestmark = pytest.mark.usefixtures("fault_mode")


def test_four_producers_four_consumers_exactly_once(cassieq_options, queue_client, queue_name):
    check_producers_and_consumers(cassieq_options, queue_client, queue_name, 2_000)
