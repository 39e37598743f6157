"""The ``acked`` counter of grouped acks (docs/client.md, ``stats``): a grouped ack is a
compare-and-set whose lost reply is settled by reading the row back, and it is counted once
then; the count is a write of its own after it, so a consumer that dies between the two has
acked the message (it is never delivered again, its group goes on) and left the counter one
short: the live figures (``in_flight``, ``backlog``) are read from the messages and stay exact.
"""

from __future__ import annotations

import multiprocessing as mp

import pytest

from cassieq_spark.engine.store import faults
from tests.support import groups_run

pytestmark = [pytest.mark.integration]


def test_a_grouped_ack_whose_reply_is_lost_is_counted_once(fault_mode, queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    q.put(queue_name, b"a", group="g")
    q.put(queue_name, b"b", group="g")
    first = q.get(queue_name)
    faults.inject(faults.LOST_REPLY, r"SET acked = true, claimed_by", times=1)
    assert q.ack(queue_name, first.pop_receipt) is True
    assert q.ack(queue_name, first.pop_receipt) is False  # applied once: a repeat is stale
    second = q.get(queue_name)
    assert second is not None and second.payload == b"b"
    faults.inject(faults.LOST_REPLY, r"SET acked = true, claimed_by", times=1)
    assert q.ack(queue_name, second.pop_receipt) is True
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (2, 0, 0)


def test_a_consumer_killed_after_its_grouped_ack_applied_leaves_it_acked_and_uncounted(
    fault_mode, cassieq_options, queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=2)
    q.put(queue_name, b"a", group="g")
    q.put(queue_name, b"b", group="g")
    first = q.get(queue_name)
    p = mp.get_context("spawn").Process(
        target=groups_run.ack_and_die_before_counting,
        args=(cassieq_options, queue_name, first.pop_receipt),
    )
    p.start()
    p.join(60)
    assert p.exitcode == -9, f"the acking consumer exited with {p.exitcode}, not by its SIGKILL"
    assert q.ack(queue_name, first.pop_receipt) is False  # its ack applied before the kill
    second = q.get(queue_name)  # the group is released: the next message comes
    assert second is not None and second.payload == b"b"
    assert q.ack(queue_name, second.pop_receipt) is True
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (1, 0, 0)
