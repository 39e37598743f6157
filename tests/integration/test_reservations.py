"""Reservations on the real Cassandra: a reader handing a block to repair and its late writer
closing it are serialized, so exactly one of them wins; the horizon stops at open blocks."""

from __future__ import annotations

import time

import pytest

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import write_messages
from cassieq_spark.engine.upkeep.ranges import record_skipped

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


def _queue(queue_client, name, repair_timeout=0.5):
    return queue_client.create_queue(name, bucket_size=10, repair_timeout=repair_timeout)


def test_horizon_stops_at_an_open_fresh_reservation(queue_client, queue_name):
    q = _queue(queue_client, queue_name, repair_timeout=60)
    first = monoton.reserve(queue_client.conn, q, 5)
    second = monoton.reserve(queue_client.conn, q, 5)
    write_messages(queue_client.conn, q, second.lo, [b"x"] * 5)
    monoton.close(queue_client.conn, q, second).result()
    hz = monoton.horizon(queue_client.conn, q, 0)
    assert (hz.next_id, hz.safe_end, hz.abandoned) == (10, first.lo, ())
    write_messages(queue_client.conn, q, first.lo, [b"y"] * 5)
    monoton.close(queue_client.conn, q, first).result()
    assert monoton.horizon(queue_client.conn, q, 0).safe_end == 10


def test_horizon_window_caps_the_safe_end(queue_client, queue_name):
    q = _queue(queue_client, queue_name, repair_timeout=60)
    queue_client.put_many(q.name, [b"m"] * 50)
    assert monoton.horizon(queue_client.conn, q, 0, window=20).safe_end == 20
    assert monoton.horizon(queue_client.conn, q, 40, window=20).safe_end == 50


def test_skip_wins_over_a_late_close(queue_client, queue_name):
    q = _queue(queue_client, queue_name)
    res = monoton.reserve(queue_client.conn, q, 3)
    time.sleep(0.8)  # older than the repair timeout: abandoned
    hz = monoton.horizon(queue_client.conn, q, 0)
    assert hz.abandoned == ((res.lo, res.hi),) and hz.safe_end == 3
    assert record_skipped(queue_client.conn, q, res.lo, res.hi) is True
    write_messages(queue_client.conn, q, res.lo, [b"late"] * 3)
    closed = monoton.close(queue_client.conn, q, res).result()
    assert closed is False  # repair owns the block now
    hz = monoton.horizon(queue_client.conn, q, 0)
    assert hz.abandoned == ((res.lo, res.hi),)  # still handed to repair, not readable
    assert record_skipped(queue_client.conn, q, res.lo, res.hi) is True  # idempotent


def test_close_wins_over_a_late_skip(queue_client, queue_name):
    q = _queue(queue_client, queue_name)
    res = monoton.reserve(queue_client.conn, q, 3)
    time.sleep(0.8)
    write_messages(queue_client.conn, q, res.lo, [b"slow"] * 3)
    assert monoton.close(queue_client.conn, q, res).result() is True
    assert record_skipped(queue_client.conn, q, res.lo, res.hi) is False
    hz = monoton.horizon(queue_client.conn, q, 0)
    assert hz.abandoned == () and hz.safe_end == 3
    rows = queue_client.conn.execute(
        "SELECT lo FROM {ks}.skipped WHERE queue_id = ?", (q.queue_id,)
    ).all()
    assert rows == []


def test_prompt_close_is_a_plain_write(queue_client, queue_name, monkeypatch):
    q = _queue(queue_client, queue_name, repair_timeout=60)
    res = monoton.reserve(queue_client.conn, q, 2)
    cas_calls = []
    real_cas = queue_client.conn.cas
    monkeypatch.setattr(
        queue_client.conn, "cas", lambda *a, **kw: cas_calls.append(a[0]) or real_cas(*a, **kw)
    )
    assert monoton.close(queue_client.conn, q, res).result() is True
    assert cas_calls == []  # no Paxos round was spent on the close
    row = queue_client.conn.execute(
        "SELECT lo FROM {ks}.monoton WHERE queue_id = ? AND lo = ?", (q.queue_id, res.lo)
    ).one()
    assert row is None  # a closed reservation is the absence of its row
    assert monoton.horizon(queue_client.conn, q, 0).safe_end == 2
