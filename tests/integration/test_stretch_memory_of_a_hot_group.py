"""The reader's stretch memory against the real Cassandra (engine/consume/stretch_memory.py,
docs/internals/protocol.md "Message groups"): a group with more messages waiting than a call's
window no longer hides the other groups behind it, and what the memory remembers still blocks
and releases groups exactly as a read of the stretch would. Every test also runs with every
compare-and-set's reply lost (the ``fault_mode`` fixture)."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

import pytest
from support.claim_races import get_many_raced_by_a_get

from cassieq_spark import QueueClient
from cassieq_spark.engine.consume.reader import HORIZON_WINDOW
from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import write_messages

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

# Long enough that the steps between the stalled reservation and the first get finish inside it
# on a loaded 2-core machine (as in test_engine_repair.py).
REPAIR_TIMEOUT = 3.0


def test_other_groups_behind_a_hot_group_longer_than_the_window_are_delivered_at_once(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    hot = q.put_many(queue_name, ["h"] * (HORIZON_WINDOW + 100), group="hot")
    others = {f"o{i}": q.put_many(queue_name, ["o", "o"], group=f"o{i}") for i in range(30)}
    plain = q.put_many(queue_name, ["p"] * 10)
    waiting = {m for ids in others.values() for m in ids} | set(plain)
    delivered: dict[str | None, list[int]] = defaultdict(list)
    calls = 0
    while waiting and calls < 6:
        got = q.get_many(queue_name, max_messages=100)
        calls += 1
        assert len([m for m in got if m.group == "hot"]) <= 1  # one of a group at a time
        for m in got:
            delivered[m.group].append(m.id)
            waiting.discard(m.id)
        assert all(r.ok for r in q.ack_many(queue_name, [m.pop_receipt for m in got]))
    # A scan from the hot group's next message sees nothing else within its window: without
    # the memory the others would wait for the hot group's 4,196 messages, one per call.
    assert not waiting, f"{len(waiting)} other messages still waiting after {calls} calls"
    assert delivered["hot"] == hot[:calls]
    assert all(delivered[g] == ids for g, ids in others.items())


def test_a_remembered_head_acked_by_another_client_releases_its_group(
    queue_client, queue_name, cassieq_options
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    h = q.put_many(queue_name, ["h1", "h2", "h3"], group="hot")
    a = q.put_many(queue_name, ["a1", "a2"], group="a")
    b = q.put(queue_name, "b1", group="b")
    first = {m.id: m for m in q.get_many(queue_name, max_messages=10)}
    assert sorted(first) == sorted([h[0], a[0], b])
    with QueueClient.from_options(cassieq_options) as other:
        assert other.ack(queue_name, first[a[0]].pop_receipt)  # the receipt travels
    # This client remembers a1 in flight; the head's done mark says it is finished.
    nxt = q.get_many(queue_name, max_messages=10)
    assert [m.id for m in nxt] == [a[1]]  # not h2 (h1 held), nothing of b (b1 held)
    assert q.ack(queue_name, first[h[0]].pop_receipt)
    assert [m.id for m in q.get_many(queue_name, max_messages=10)] == [h[1]]


def test_a_group_held_in_the_remembered_stretch_blocks_its_messages_beyond_it(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    h = q.put_many(queue_name, ["h1", "h2"], group="hot")
    g1 = q.put(queue_name, "g1", group="g")
    first = {m.id: m for m in q.get_many(queue_name, max_messages=10)}
    assert sorted(first) == [h[0], g1]
    g2 = q.put(queue_name, "g2", group="g")  # beyond the remembered stretch
    u = q.put(queue_name, "u")
    assert [m.id for m in q.get_many(queue_name, max_messages=10)] == [u]
    assert q.ack(queue_name, first[g1].pop_receipt)
    assert [m.id for m in q.get_many(queue_name, max_messages=10)] == [g2]


def test_an_ungrouped_message_left_unclaimed_ends_the_remembered_stretch(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    h = q.put_many(queue_name, ["h1", "h2"], group="hot")
    u = q.put_many(queue_name, [f"u{i}" for i in range(5)])
    first = q.get_many(queue_name, max_messages=3)
    assert [m.id for m in first] == [h[0], u[0], u[1]]
    # The pointer stays at h2; u2..u4 were read, fresh, and left: nothing remembers them, so
    # the stretch the next call may skip ends before them.
    assert [m.id for m in q.get_many(queue_name, max_messages=10)] == u[2:]


def test_two_clients_acking_each_other_s_deliveries_keep_every_group_in_order_and_exclusive(
    queue_client, queue_name, cassieq_options
):
    """Counted: every message delivered once, each group's deliveries in id order, and never a
    group delivered while one of its messages is in flight; the acks of a call are made after
    the next call, by either client, so the memories meet heads acked elsewhere and pointers
    moved by the other client."""
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    rng = random.Random(7)
    kinds = ["hot"] * 120 + [f"g{rng.randrange(10)}" for _ in range(80)] + [None] * 20
    rng.shuffle(kinds)
    ids: dict[int, str | None] = {}
    for k in kinds:
        ids[q.put(queue_name, "x", group=k)] = k
    with QueueClient.from_options(cassieq_options) as other:
        clients = [q, other]
        count: Counter[int] = Counter()
        order: dict[str, list[int]] = defaultdict(list)
        in_flight: dict[str, int] = {}
        pending: list = []
        for call in range(600):
            got = clients[call % 2].get_many(queue_name, max_messages=7)
            for m in got:
                count[m.id] += 1
                if m.group is not None:
                    assert m.group not in in_flight, (m.id, m.group, in_flight[m.group])
                    in_flight[m.group] = m.id
                    order[m.group].append(m.id)
            for m in pending:
                assert rng.choice(clients).ack(queue_name, m.pop_receipt)
                if m.group is not None:
                    del in_flight[m.group]
            pending = got
            if len(count) == len(ids) and not pending:
                break
    assert count == Counter({m: 1 for m in ids}), "each message delivered exactly once"
    for g, delivered in order.items():
        assert delivered == sorted(m for m, k in ids.items() if k == g), g


def test_a_lost_race_in_the_remembered_stretch_never_takes_a_row_handed_to_repair(
    queue_client, queue_name, cassieq_options
):
    """A call that loses the claim of a remembered row reads the stretch from the table, with
    the reservations handed to repair in it: a message in one (its writer stalled past the
    repair timeout) is repair's to republish, never a candidate, even when no new id arrived
    since the memory was made."""
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30, repair_timeout=REPAIR_TIMEOUT)
    info = q.get_queue(queue_name)
    h = q.put_many(queue_name, ["h1", "h2"], group="hot")
    stalled = monoton.reserve(q.conn, info, 1)
    write_messages(q.conn, info, stalled.lo, [b"late"])  # written, never closed: writer died
    a = q.put(queue_name, "a1", group="a")
    time.sleep(REPAIR_TIMEOUT + 0.5)
    first = {m.id: m for m in q.get_many(queue_name, max_messages=10)}
    assert sorted(first) == [h[0], a]  # the stalled block is handed to repair
    assert q.ack(queue_name, first[h[0]].pop_receipt)
    # The memory now holds h2 (fresh) and a1 (held). Another client takes h2 between this
    # client's read of it and its claim: the claim loses, the stretch is read from the table.
    with QueueClient.from_options(cassieq_options) as other:
        got, taken = get_many_raced_by_a_get(q, other, queue_name, 10)
    assert [m.id for m in taken if m is not None] == [h[1]]
    assert stalled.lo not in {m.id for m in got}, "a row handed to repair was delivered"
    assert got == []  # h2 is the other client's, a1 still held
