"""Two ``update_queue`` calls at once that would make two queues each other's dead-letter
queue (each checks the chain before the other's change is written) leave no cycle: the one
that closes it is undone and refused. Forced through the fault seam, and raced, counted."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import faults
from cassieq_spark.errors import ConfigError

pytestmark = [pytest.mark.integration]

TRIALS = 5


@pytest.fixture
def two_clients(cassieq_options, queue_client) -> Iterator[tuple[QueueClient, QueueClient]]:
    a, b = QueueClient.from_options(cassieq_options), QueueClient.from_options(cassieq_options)
    yield a, b
    a.close()
    b.close()
    faults.reset()


def _cycle(client: QueueClient, first: str, second: str) -> bool:
    return (
        client.get_queue(first).dead_letter_queue == second
        and client.get_queue(second).dead_letter_queue == first
    )


def test_an_update_that_closes_a_cycle_between_its_check_and_its_write_is_undone(
    two_clients, queue_client, queue_name
):
    first, second = f"{queue_name}_a", f"{queue_name}_b"
    queue_client.create_queue(first)
    queue_client.create_queue(second)
    c1, c2 = two_clients
    ran: list[str] = []

    def other_update(queue: str) -> None:
        if queue == first and not ran:  # once: the other update's own check passes this point
            ran.append(c2.update_queue(second, dead_letter_queue=first).name)

    faults.on("queues.dead_letter_chain_checked", other_update)
    with pytest.raises(ConfigError, match=r"formed a cycle .* the previous one is back"):
        c1.update_queue(first, dead_letter_queue=second)
    assert ran == [second]
    assert queue_client.get_queue(first).dead_letter_queue is None
    assert queue_client.get_queue(second).dead_letter_queue == first


def test_two_racing_updates_never_leave_two_queues_each_others_dead_letter_queue(
    two_clients, queue_client, queue_name
):
    c1, c2 = two_clients
    outcomes = {"applied": 0, "refused": 0}
    cycles = 0
    lock = threading.Lock()
    for trial in range(TRIALS):
        first, second = f"{queue_name}_{trial}a", f"{queue_name}_{trial}b"
        queue_client.create_queue(first)
        queue_client.create_queue(second)
        barrier = threading.Barrier(2)

        def update(client: QueueClient, name: str, dlq: str, barrier=barrier) -> None:
            barrier.wait()
            try:
                client.update_queue(name, dead_letter_queue=dlq)
                key = "applied"
            except ConfigError as exc:
                assert "cycle" in str(exc), exc
                key = "refused"
            with lock:
                outcomes[key] += 1

        threads = [
            threading.Thread(target=update, args=(c1, first, second)),
            threading.Thread(target=update, args=(c2, second, first)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        cycles += _cycle(queue_client, first, second)
    assert cycles == 0
    assert outcomes["applied"] + outcomes["refused"] == 2 * TRIALS
    assert outcomes["applied"] <= TRIALS, outcomes
