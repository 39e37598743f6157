"""A coordinator that is shutting down (a rolling restart drains one node at a time, a
whole-cluster stop drains them all) refuses requests with Overloaded "Server is shutting down",
before it runs them. The driver's retry policy sends any statement on to the next node; what
still reaches the engine with that error (every node tried was shutting down) is sent again
after a pause, as a request no node received is, so no caller sees it: a compare-and-set runs
once, a counter update counts once. When the nodes stay away, the caller gets
``CassandraUnavailableError``, marked as not delivered.

``faults.REFUSED_BEFORE`` raises the error a draining node sends, before anything runs.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from cassieq_spark import CassandraUnavailableError
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.store.failures import UNSENT_RETRY_DELAYS

pytestmark = pytest.mark.integration

COUNTER_UPDATE = r"UPDATE \S*counters SET"


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


@pytest.mark.fast
def test_an_ack_whose_acked_count_is_refused_reports_the_ack(queue_client, queue_name):
    """The ack applied; the refused count after it must not turn it into an error (the caller
    would handle the message again)."""
    queue_client.create_queue(queue_name, repair_timeout=30)
    mid = queue_client.put(queue_name, b"a")
    msg = queue_client.get(queue_name, visibility_timeout=30)
    assert msg is not None and msg.id == mid
    rule = faults.inject(faults.REFUSED_BEFORE, COUNTER_UPDATE + r" acked")
    assert queue_client.ack(queue_name, msg.pop_receipt) is True
    assert rule.hits == 1
    assert queue_client.get(queue_name, visibility_timeout=1) is None
    assert queue_client.stats(queue_name)["acked"] == 1  # sent again: it had not run


@pytest.mark.fast
def test_a_put_whose_enqueued_count_is_refused_returns_its_id_once(queue_client, queue_name):
    """The message is written; an error would make the caller put it again (a second copy)."""
    queue_client.create_queue(queue_name, repair_timeout=30)
    rule = faults.inject(faults.REFUSED_BEFORE, COUNTER_UPDATE + r" enqueued")
    mid = queue_client.put(queue_name, b"a")
    assert rule.hits == 1
    msg = queue_client.get(queue_name, visibility_timeout=30)
    assert msg is not None and msg.id == mid and msg.payload == b"a"
    assert queue_client.ack(queue_name, msg.pop_receipt)
    assert queue_client.get(queue_name, visibility_timeout=1) is None
    assert queue_client.stats(queue_name)["enqueued"] == 1


def test_a_put_every_node_keeps_refusing_fails_as_unavailable_and_writes_nothing(
    queue_client, queue_name
):
    """A whole cluster shutting down: the compare-and-set reserving the message's id is sent
    again for a few seconds, then the caller gets the error it can act on, marked as never
    delivered, and no message exists."""
    queue_client.create_queue(queue_name, repair_timeout=1)
    rule = faults.inject(faults.REFUSED_BEFORE, r"UPDATE \S+\.monoton SET next", times=None)
    with pytest.raises(CassandraUnavailableError) as info:
        queue_client.put(queue_name, b"never")
    assert info.value.delivered is False
    assert "shutting down" in str(info.value) and "retry once the cluster is back" in str(
        info.value
    )
    assert rule.hits == 1 + len(UNSENT_RETRY_DELAYS)
    faults.reset()
    queue_client.repair(queue_name)
    assert queue_client.get(queue_name, visibility_timeout=1) is None
    mid = queue_client.put(queue_name, b"after")
    msg = queue_client.get(queue_name, visibility_timeout=30)
    assert msg is not None and msg.id == mid and msg.payload == b"after"


class _RefuseEachOnce:
    """Matches the first execution of every distinct compare-and-set and counter update: each
    one the workload sends is refused once, as a draining coordinator would."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, cql: str) -> bool:
        if not (faults.is_conditional(cql) or re.search(COUNTER_UPDATE, cql)):
            return False
        key = " ".join(cql.split())
        with self.lock:
            if key in self.refused:
                return False
            self.refused.add(key)
            return True


def test_every_refused_compare_and_set_and_count_stays_inside_the_engine(queue_client, queue_name):
    """put, put_many, get, get_many, ack, ack_many, change_visibility and a redelivery, each of
    their compare-and-sets and counter updates refused once: no error reaches the caller and
    every message is acked exactly once. (The repair pass finds nothing to repair here and
    sends none.)"""
    refuse = _RefuseEachOnce()
    faults.inject(faults.REFUSED_BEFORE, refuse, times=None)
    queue_client.create_queue(queue_name, repair_timeout=30)
    sent = {queue_client.put(queue_name, f"one-{k}".encode()): f"one-{k}" for k in range(3)}
    ids = queue_client.put_many(queue_name, [f"many-{k}".encode() for k in range(5)])
    sent.update({mid: f"many-{k}" for k, mid in enumerate(ids)})
    assert len(sent) == 8

    acked: list[int] = []
    msg = queue_client.get(queue_name, visibility_timeout=30)
    assert msg is not None
    assert queue_client.ack(queue_name, msg.pop_receipt)
    acked.append(msg.id)

    batch = queue_client.get_many(queue_name, 3, visibility_timeout=30)
    assert len(batch) == 3
    results = queue_client.ack_many(queue_name, [m.pop_receipt for m in batch])
    assert [r.status for r in results] == ["ok"] * 3, results
    acked.extend(m.id for m in batch)

    held = queue_client.get(queue_name, visibility_timeout=30)
    assert held is not None
    moved = queue_client.change_visibility(queue_name, held.pop_receipt, 0.5)
    time.sleep(1.0)
    again = queue_client.get(queue_name, visibility_timeout=30)
    assert again is not None and again.id == held.id and moved is not None
    assert queue_client.ack(queue_name, again.pop_receipt)
    acked.append(again.id)

    queue_client.repair(queue_name)
    while (msg := queue_client.get(queue_name, visibility_timeout=30)) is not None:
        assert queue_client.ack(queue_name, msg.pop_receipt)
        acked.append(msg.id)

    assert sorted(acked) == sorted(sent), (acked, sent)
    refused = "\n".join(sorted(c[:70] for c in refuse.refused))
    assert any("counters" in c for c in refuse.refused), refused
    # queue insert, reservation, claims (get, get_many), ack, visibility, reader, timer slot
    assert sum(faults.is_conditional(c) for c in refuse.refused) >= 6, refused
