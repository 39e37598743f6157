"""A move the destination refuses (a message larger than its max_payload_bytes) leaves the
message in the source as it was: visible at once, its delivery count unchanged, however often
the move is retried; it is never dead-lettered or dropped by the retries."""

from __future__ import annotations

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.errors import ConfigError

pytestmark = pytest.mark.integration

BIG = b"x" * 31  # larger than the destination's 10 bytes


@pytest.mark.parametrize("row", ["N91", "N85"])
def test_refused_move_neither_counts_a_delivery_nor_drops(
    queue_client: QueueClient, queue_name: str, row: str
) -> None:
    """N91: seven refused runs of one move (the source has no dead-letter queue and allows 5
    deliveries); N85: a move of many messages stopped by the one that does not fit."""
    source, small = queue_name, f"{queue_name}_small"
    queue_client.create_queue(source, max_delivery_count=5)
    queue_client.create_queue(small, max_payload_bytes=10)
    if row == "N85":
        queue_client.put_many(source, [b"fits" for _ in range(6)])
    big_id = queue_client.put(source, BIG)
    for _ in range(7 if row == "N91" else 1):
        with pytest.raises(ConfigError, match="stays in the source"):
            queue_client.move(source, to=small, visibility_timeout=300)
    stats = queue_client.stats(source)
    assert stats["in_flight"] == 0
    assert stats["backlog"] == 1
    assert stats.get("dropped", 0) == 0 and stats.get("dead_lettered", 0) == 0
    msg = queue_client.get(source)
    assert msg is not None and msg.id == big_id and msg.payload == BIG
    assert msg.delivery_count == 1, "the refused moves counted as deliveries"
    moved = queue_client.get_many(small, max_messages=10)
    assert len(moved) == (6 if row == "N85" else 0)
