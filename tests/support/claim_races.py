"""Claims raced by another client at the engine's ``batch.before_claim`` point."""

from __future__ import annotations

from cassieq_spark import Message, QueueClient
from cassieq_spark.engine.store import faults


def get_many_raced_by_a_get(
    client: QueueClient, other: QueueClient, queue: str, max_messages: int
) -> tuple[list[Message], list[Message | None]]:
    """``client.get_many`` while ``other`` runs one ``get`` between the batch's read and its
    claim (once); returns what the batch got and what the ``get`` took."""
    taken: list[Message | None] = []

    def race(**_context) -> None:
        faults.state.points.pop("batch.before_claim", None)
        taken.append(other.get(queue))

    faults.on("batch.before_claim", race)
    try:
        got = client.get_many(queue, max_messages=max_messages)
    finally:
        faults.state.points.pop("batch.before_claim", None)
    return got, taken
