"""Batch receive and acknowledgement (``get_many``, ``ack_many``, ``change_visibility_many``,
``cassieq get --max --wait``) against the real Cassandra; each test also runs with every
compare-and-set's reply lost (the ``fault_mode`` fixture)."""

from __future__ import annotations

import collections
import itertools
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.claim_races import get_many_raced_by_a_get

from cassieq_spark import QueueClient
from cassieq_spark.cli import EXIT_EMPTY, EXIT_USAGE
from cassieq_spark.engine.core.receipts import PopReceipt
from cassieq_spark.engine.store import faults
from cassieq_spark.errors import ConfigError, InvalidReceiptError

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]

BATCH_CLAIM = "IF version = null AND acked = null AND dead = null"


@pytest.fixture(autouse=True)
def _clean_faults():
    faults.reset()
    yield
    faults.reset()


class _Counting:
    """Counts the statements a client sends, by CQL text (nothing is changed)."""

    def __init__(self, monkeypatch, conn):
        self.seen: collections.Counter = collections.Counter()
        execute, execute_async = conn.execute, conn.execute_async

        def text(statement) -> str:
            if isinstance(statement, str):
                return statement
            statement = getattr(statement, "prepared_statement", statement)
            return getattr(statement, "query_string", "") or type(statement).__name__

        def counted(statement, *a, **kw):
            self.seen[text(statement)] += 1
            return execute(statement, *a, **kw)

        def counted_async(statement, *a, **kw):
            self.seen[text(statement)] += 1
            return execute_async(statement, *a, **kw)

        monkeypatch.setattr(conn, "execute", counted)
        monkeypatch.setattr(conn, "execute_async", counted_async)

    def count(self, *fragments: str) -> int:
        return sum(n for cql, n in self.seen.items() if all(f in cql for f in fragments))

    def lwt(self) -> int:
        return sum(n for cql, n in self.seen.items() if faults.is_conditional(cql))

    def total(self) -> int:
        return sum(self.seen.values())


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"max_messages": 0}, "max_messages"),
        ({"max_messages": 1001}, "max_messages"),
        ({"max_messages": -3}, "max_messages"),
        ({"max_messages": 2.5}, "max_messages"),
        ({"max_messages": True}, "max_messages"),
        ({"wait_seconds": -1}, "wait_seconds"),
        ({"wait_seconds": 20.5}, "wait_seconds"),
        ({"wait_seconds": float("nan")}, "wait_seconds"),
        ({"visibility_timeout": 0}, "visibility timeout"),
    ],
)
def test_get_many_refuses_values_out_of_range(queue_client, queue_name, kwargs, names):
    queue_client.create_queue(queue_name)
    with pytest.raises(ConfigError, match=names):
        queue_client.get_many(queue_name, **kwargs)


def test_batch_acks_refuse_malformed_calls(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name)
    with pytest.raises(ConfigError, match="pop_receipts has 1001 entries; at most 1000"):
        q.ack_many(queue_name, ["r1x"] * 1001)
    with pytest.raises(ConfigError, match="pop_receipts must be a list of receipts"):
        q.ack_many(queue_name, "r1abc")
    with pytest.raises(ConfigError, match=r"entries\[1\] must be a \(receipt, timeout\) pair"):
        q.change_visibility_many(queue_name, [("r1x", 1), "r1y"])
    with pytest.raises(ConfigError, match=r"entries\[0\] timeout must be at most 43200"):
        q.change_visibility_many(queue_name, [("r1x", 50_000)])
    assert q.ack_many(queue_name, []) == [] == q.change_visibility_many(queue_name, [])


# -- receiving ------------------------------------------------------------------------------------


def test_get_many_claims_fresh_messages_in_fifo_order_one_paxos_round_per_bucket(
    queue_client, queue_name, monkeypatch
):
    q = queue_client
    q.create_queue(queue_name, bucket_size=1000)
    ids = q.put_many(queue_name, [f"m{i}" for i in range(1200)], headers={"k": "v"})
    counting = _Counting(monkeypatch, q.conn)
    got = q.get_many(queue_name, 900)
    assert [m.id for m in got] == ids[:900]
    assert [m.text for m in got] == [f"m{i}" for i in range(900)]
    assert all(m.delivery_count == 1 and m.headers == {"k": "v"} for m in got)
    claims = counting.count("BEGIN BATCH", BATCH_CLAIM)
    lwt = counting.lwt()
    total = counting.total()
    print(f"\nget_many(900): {claims} batch claims, {lwt} LWT rounds, {total} statements")
    assert claims == 1  # 900 rows of one bucket
    # Besides: at most one move of the reader pointer and one of the invisibility pointer.
    assert lwt <= claims + 2, [c[:90] for c in counting.seen if faults.is_conditional(c)]
    assert total <= 80, counting.seen  # the bodies are read 32 at a time (1 MiB payloads)
    counting.seen.clear()
    rest = q.get_many(queue_name, 1000)  # 100 of bucket 0, 200 of bucket 1
    assert [m.id for m in rest] == ids[900:]
    assert counting.count("BEGIN BATCH", BATCH_CLAIM) == 2
    assert q.get_many(queue_name, 10) == []
    receipts = [m.pop_receipt for m in got + rest]
    counting.seen.clear()
    results = q.ack_many(queue_name, receipts[:1000])  # bucket 0
    # Per 250 receipts of a bucket one read and one batch of writes, and one counter update.
    assert counting.total() == 9 and counting.lwt() == 0, counting.seen
    results += q.ack_many(queue_name, receipts[1000:])
    assert all(r.ok for r in results) and len(results) == 1200
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (1200, 0, 0)


def test_get_many_claims_bucket_by_bucket(queue_client, queue_name, monkeypatch):
    q = queue_client
    q.create_queue(queue_name, bucket_size=7)
    ids = q.put_many(queue_name, [b"x"] * 40)
    counting = _Counting(monkeypatch, q.conn)
    got = q.get_many(queue_name, 40)
    assert [m.id for m in got] == ids
    assert counting.count("BEGIN BATCH", BATCH_CLAIM) == 6  # ids 0-6, 7-13, ..., 35-39


def test_redeliveries_come_back_one_claim_each_in_one_pass_over_the_timers(
    queue_client, queue_name, monkeypatch
):
    q = queue_client
    q.create_queue(queue_name)
    ids = q.put_many(queue_name, [b"r"] * 30)
    first = q.get_many(queue_name, 30, visibility_timeout=1)
    assert [m.id for m in first] == ids
    time.sleep(1.5)
    counting = _Counting(monkeypatch, q.conn)
    again = q.get_many(queue_name, 30, wait_seconds=5)
    assert sorted(m.id for m in again) == ids
    assert all(m.delivery_count == 2 for m in again)
    claims = counting.count("SET version = ?, deliveries = ?", "IF version = ?")
    slot_reads = counting.count("SELECT id FROM {ks}.timers")
    assert claims == 30  # one compare-and-set per redelivery, as get
    assert slot_reads <= 8, slot_reads  # not one read of the due slots per message


def test_a_get_racing_a_batch_for_one_of_its_rows_wins_it_alone(
    cassieq_options, queue_client, queue_name
):
    """The batch claim carries the single claim's condition on every row: a `get` (here from
    another client) that takes one row between the batch's read and its claim makes the whole
    batch fail; the batch reads again and takes the rest, never the row the get holds."""
    q = queue_client
    q.create_queue(queue_name)
    ids = q.put_many(queue_name, [b"p"] * 20)
    with QueueClient.from_options(cassieq_options) as other:
        got, taken = get_many_raced_by_a_get(q, other, queue_name, 20)
    assert taken and taken[0] is not None
    assert taken[0].id not in {m.id for m in got}
    assert sorted([taken[0].id, *(m.id for m in got)]) == ids


@pytest.mark.parametrize("mode", [faults.LOST_REPLY, faults.TIMEOUT_BEFORE])
def test_a_batch_claim_with_an_unknown_outcome_is_settled_by_reading(
    queue_client, queue_name, monkeypatch, mode
):
    """The claim applied and its reply was lost (the messages are ours: returned, not left in
    flight), or it never ran (claimed again): read back at SERIAL, decided by the token."""
    q = queue_client
    q.create_queue(queue_name)
    ids = q.put_many(queue_name, [b"x"] * 30)
    rule = faults.inject(mode, r"BEGIN BATCH UPDATE \S+\.messages", times=1)
    faults.state.rules.remove(rule)
    faults.state.rules.insert(0, rule)  # before the rule of CASSIEQ_FAULTS=lost-reply, if any
    counting = _Counting(monkeypatch, q.conn)
    got = q.get_many(queue_name, 30)
    assert rule.hits == 1
    claims = counting.count("BEGIN BATCH", BATCH_CLAIM)
    if mode == faults.LOST_REPLY:
        assert [m.id for m in got] == ids and claims == 1
    else:  # taken for a lost race: claimed again, in smaller batches from a random place
        assert sorted(m.id for m in got) == ids and claims >= 2
    assert all(r.ok for r in q.ack_many(queue_name, [m.pop_receipt for m in got]))


def test_long_poll_returns_early_when_a_message_arrives(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name)
    assert q.get_many(queue_name, 5) == []

    def put_later():
        time.sleep(1.0)
        q.put(queue_name, b"late")

    t = threading.Thread(target=put_later)
    started = time.monotonic()
    t.start()
    got = q.get_many(queue_name, 5, wait_seconds=15)
    elapsed = time.monotonic() - started
    t.join()
    assert [m.payload for m in got] == [b"late"]
    assert 0.9 <= elapsed < 6.0, elapsed


def test_long_poll_returns_empty_after_the_wait(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name)
    started = time.monotonic()
    assert q.get_many(queue_name, 5, wait_seconds=1.5) == []
    assert 1.5 <= time.monotonic() - started < 4.0


# -- acknowledging ------------------------------------------------------------------------------


def test_ack_many_reports_each_receipt_and_never_fails_the_batch(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name)
    other = f"{queue_name}_o"
    q.create_queue(other)
    q.put(other, b"o")
    foreign = q.get(other).pop_receipt
    q.put_many(queue_name, [b"a", b"b", b"c"])
    first = q.get_many(queue_name, 3, visibility_timeout=1)
    time.sleep(1.5)
    again = q.get_many(queue_name, 1, visibility_timeout=60, wait_seconds=5)
    assert len(again) == 1  # one of the three, redelivered: its first receipt is stale
    redelivered = again[0].id
    info = q.get_queue(queue_name)
    forged = PopReceipt.issue(info, first[0].id, 77)
    receipts = [m.pop_receipt for m in first] + ["garbage", foreign, forged, first[0].pop_receipt]
    results = q.ack_many(queue_name, receipts)
    assert [r.receipt for r in results] == receipts
    statuses = [r.status for r in results]
    expected = ["stale" if m.id == redelivered else "ok" for m in first]
    # version 77 was never issued: invalid, not stale (tests/integration/test_forged_receipts.py)
    assert statuses == [*expected, "invalid", "invalid", "invalid", "stale"]
    assert "not a receipt of queue" in results[4].reason
    assert all(r.reason for r in results if not r.ok)
    # The holder of the redelivery acks it; the stale receipts stay refused.
    assert [r.status for r in q.ack_many(queue_name, [again[0].pop_receipt])] == ["ok"]
    assert all(not r.ok for r in q.ack_many(queue_name, [m.pop_receipt for m in first]))
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (3, 0, 0)


def test_change_visibility_many(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=60)
    q.put_many(queue_name, [b"a", b"b", b"c"])
    a, b, c = q.get_many(queue_name, 3)
    assert q.ack(queue_name, c.pop_receipt)
    results = q.change_visibility_many(
        queue_name, [(a.pop_receipt, 0), (b.pop_receipt, 120), (c.pop_receipt, 5), ("r1zz", 1)]
    )
    assert [r.status for r in results] == ["ok", "ok", "stale", "invalid"]
    assert results[0].new_receipt and results[1].new_receipt and results[2].new_receipt is None
    back = q.get_many(queue_name, 10, wait_seconds=5)  # `a` released at once, `b` hidden
    assert [m.id for m in back] == [a.id]
    with pytest.raises(InvalidReceiptError):
        q.change_visibility(queue_name, "garbage", 1)
    assert q.ack_many(queue_name, [b.pop_receipt])[0].status == "stale"  # replaced
    assert q.ack_many(queue_name, [results[1].new_receipt])[0].ok


def test_change_visibility_many_takes_one_paxos_round_per_bucket_when_every_receipt_holds(
    queue_client, queue_name, monkeypatch
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=60, bucket_size=100, message_ttl=3600)
    ids = q.put_many(queue_name, [b"v"] * 150)
    got = q.get_many(queue_name, 150)
    counting = _Counting(monkeypatch, q.conn)
    results = q.change_visibility_many(queue_name, [(m.pop_receipt, 0.5) for m in got])
    assert all(r.ok for r in results) and len(results) == 150
    assert counting.lwt() == 2, counting.seen  # buckets 0 and 1
    monkeypatch.undo()
    # The new receipts hold; the old ones are stale; the messages come back half a second on.
    assert {r.status for r in q.ack_many(queue_name, [m.pop_receipt for m in got])} == {"stale"}
    back = q.get_many(queue_name, 150, wait_seconds=5)
    while len(back) < 150:
        more = q.get_many(queue_name, 150, wait_seconds=3)
        assert more, len(back)
        back += more
    assert sorted(m.id for m in back) == ids and all(m.delivery_count == 2 for m in back)


# -- two consumer processes ------------------------------------------------------------------------

CONCURRENT_MESSAGES = 2000
CONCURRENT_VT = 3.0


def _consume(options: dict, queue: str, who: int, ready) -> list[tuple]:
    """Receive until the queue stays empty; leave every 20th message unacked on its first
    delivery (it comes back after the visibility timeout, maybe to the other consumer).
    Consumer 1 takes every other turn with a single ``get``: both claim paths race."""
    records = []
    with QueueClient.from_options(options) as client:
        ready.wait(timeout=60)  # both connected: start together
        for turn in itertools.count():
            t0 = time.time()
            if who == 1 and turn % 2:
                one = client.get(queue, visibility_timeout=CONCURRENT_VT)
                batch = [one] if one is not None else []
            else:
                batch = client.get_many(
                    queue, 50, visibility_timeout=CONCURRENT_VT, wait_seconds=CONCURRENT_VT + 3
                )
                if not batch:
                    return records
            t1 = time.time()
            keep = [m for m in batch if not (m.id % 20 == 0 and m.delivery_count == 1)]
            t2 = time.time()
            results = client.ack_many(queue, [m.pop_receipt for m in keep])
            acked = {m.id: r.ok for m, r in zip(keep, results, strict=True)}
            for m in batch:
                version = PopReceipt.decode(m.pop_receipt).version
                records.append(
                    (
                        m.id,
                        version,
                        t0,
                        t1,
                        t2,
                        acked.get(m.id),
                        who,
                        m.pop_receipt,
                        m.delivery_count,
                    )
                )
    return records


@pytest.mark.slow  # 20-30 s: not in make test-fast
def test_two_consumer_processes_deliver_each_message_once(
    cassieq_options, queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=CONCURRENT_VT, bucket_size=1000)
    ids = q.put_many(queue_name, [str(i) for i in range(CONCURRENT_MESSAGES)])
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        ready = manager.Barrier(2)
        runs = [
            pool.apply_async(_consume, (cassieq_options, queue_name, who, ready)) for who in (0, 1)
        ]
        records = [r for run in runs for r in run.get(timeout=120)]

    per_consumer = collections.Counter(r[6] for r in records)
    print(f"\ndeliveries per consumer: {dict(per_consumer)}, total {len(records)}")
    assert per_consumer[0] > 0 and per_consumer[1] > 0, per_consumer
    acks = collections.Counter(r[0] for r in records if r[5])
    assert set(acks) == set(ids), f"never acked: {sorted(set(ids) - set(acks))[:5]}"
    assert max(acks.values()) == 1, "a message was acked twice"
    # A (message, version) is handed out once: two consumers never hold one delivery.
    versions = collections.Counter((r[0], r[1]) for r in records)
    assert max(versions.values()) == 1
    # Held windows of one id by different consumers never overlap: a redelivery is claimed
    # only after the earlier delivery's timeout (which started after its get was called).
    by_id = collections.defaultdict(list)
    for mid, version, t0, t1, t2, acked, who, _, _ in records:
        end = t2 if acked else t0 + CONCURRENT_VT
        by_id[mid].append((t1, min(end, t0 + CONCURRENT_VT), version, who))
    for mid, windows in by_id.items():
        windows.sort(key=lambda w: w[2])
        for a, b in zip(windows, windows[1:], strict=False):
            assert b[0] >= a[1], (mid, a, b)
    # Every 20th message was left on its first delivery and acked on the next. A claim that
    # reached its consumer after its visibility timeout (a slow call on a loaded machine) is
    # not handed out: that message's first delivery seen here is its second, and is acked.
    unacked_first = [r for r in records if r[0] % 20 == 0 and r[8] == 1]
    assert all(r[5] is None and len(by_id[r[0]]) == 2 for r in unacked_first)
    withheld = {r[0] for r in records if r[0] % 20 == 0} - {r[0] for r in unacked_first}
    assert all(len(by_id[mid]) == 1 for mid in withheld)
    assert len(unacked_first) + len(withheld) == CONCURRENT_MESSAGES // 20
    assert len(unacked_first) >= CONCURRENT_MESSAGES // 40, "too few redeliveries to prove much"
    # Stale receipts are refused.
    stale = q.ack_many(queue_name, [r[7] for r in unacked_first])
    assert {r.status for r in stale} == {"stale"}
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (CONCURRENT_MESSAGES, 0, 0)


# -- the command line ------------------------------------------------------------------------------


@pytest.mark.slow  # 20-30 s: not in make test-fast
def test_cli_get_max_wait_prints_json_lines(cassieq_options, queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name)
    q.put_many(queue_name, ["one", "two", "three"])
    env = {
        **os.environ,
        "CASSIEQ_CONTACT_POINTS": cassieq_options["contactPoints"],
        "CASSIEQ_PORT": cassieq_options["port"],
        "CASSIEQ_KEYSPACE": cassieq_options["keyspace"],
    }
    cassieq = str(Path(sys.executable).parent / "cassieq")

    def run(*args):
        return subprocess.run([cassieq, *args], env=env, capture_output=True, text=True, timeout=60)

    got = run("get", queue_name, "--max", "2", "--wait", "1")
    assert got.returncode == 0, got.stderr
    lines = [json.loads(line) for line in got.stdout.splitlines()]
    assert [m["payload"] for m in lines] == ["one", "two"]
    assert all(m["pop_receipt"] and m["delivery_count"] == 1 for m in lines)
    single = run("get", queue_name)  # without --max: one JSON object, as always
    assert single.returncode == 0 and json.loads(single.stdout)["payload"] == "three"
    q.put(queue_name, "four")
    waited = run("get", queue_name, "--wait", "1")  # --wait alone: up to one message
    assert waited.returncode == 0 and json.loads(waited.stdout)["payload"] == "four"
    started = time.monotonic()
    empty = run("get", queue_name, "--max", "5", "--wait", "1")
    assert (empty.returncode, empty.stdout) == (EXIT_EMPTY, "")
    assert time.monotonic() - started >= 1.0
    for args, named in ((["--max", "0"], "--max"), (["--wait", "-1"], "--wait")):
        bad = run("get", queue_name, *args)
        assert bad.returncode == EXIT_USAGE and named in bad.stderr, bad.stderr
    assert q.ack_many(queue_name, [m["pop_receipt"] for m in lines])[0].ok
