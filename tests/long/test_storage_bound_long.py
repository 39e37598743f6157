"""Storage bounded by what is in flight, not by history, over long histories: 10,000 messages
(about four minutes here) and 100,000 through every path of a queue. The same check at 2,000
messages runs in `make test` (test_storage_stays_bounded_whatever_the_history of
tests/integration/test_protocol_consumer.py)."""

from __future__ import annotations

import pytest
from support.storage import check_storage_stays_bounded


@pytest.mark.parametrize("n", [10_000, 100_000], ids=["10k", "100k"])
def test_storage_stays_bounded_over_a_long_history(own_keyspace_client, monkeypatch, capsys, n):
    check_storage_stays_bounded(own_keyspace_client, n, monkeypatch, capsys)
