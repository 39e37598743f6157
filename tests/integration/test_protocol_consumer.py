"""Protocol review findings of the client consumer, repair and their settings (issue 10), each
forced deterministically against the real Cassandra.

Each test's docstring says what the code before the fix did in the same scenario; "verified"
means the test was run against that code and failed there.
"""

from __future__ import annotations

import collections
import importlib
import time
import uuid

import pytest
from cassandra import WriteTimeout
from cassandra.policies import WriteType
from support.storage import check_storage_stays_bounded

from cassieq_spark import ConfigError, QueueClient, QueueNotFoundError
from cassieq_spark.config import connection_from_options
from cassieq_spark.engine.consume.consumer import HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE
from cassieq_spark.engine.core import clock, monoton
from cassieq_spark.engine.core.buckets import bucket_of
from cassieq_spark.engine.core.messages import write_messages
from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _drain(client, queue, seconds, *, ack=lambda m: True, stop=lambda got: False, **kw):
    """Every message ``get`` returns within ``seconds`` (acked when ``ack(msg)``)."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop(got):
        msg = client.get(queue, **kw)
        if msg is None:
            time.sleep(0.1)
            continue
        got.append(msg)
        if ack(msg):
            assert client.ack(queue, msg.pop_receipt)
    return got


def _row(client, info, mid, cols="version, deliveries, acked, dead"):
    return client.conn.execute(
        f"SELECT {cols} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
        (info.queue_id, bucket_of(mid, info.bucket_size), mid),
    ).one()


class _Counting:
    """Counts (and may sabotage) the statements a client sends, by CQL text."""

    def __init__(self, monkeypatch, conn, lose=None):
        self.seen: collections.Counter = collections.Counter()
        self.lose = lose or (lambda cql: False)
        execute, execute_async = conn.execute, conn.execute_async

        def text(statement):
            if isinstance(statement, str):
                return statement
            statement = getattr(statement, "prepared_statement", statement)
            return getattr(statement, "query_string", "") or ""

        def counted(statement, *a, **kw):
            cql = text(statement)
            self.seen[cql] += 1
            if self.lose(cql):  # the request never reached a coordinator
                raise WriteTimeout(
                    "sabotaged", consistency=None, required_responses=1,
                    received_responses=0, write_type=WriteType.CAS,
                )  # fmt: skip
            return execute(statement, *a, **kw)

        def counted_async(statement, *a, **kw):
            self.seen[text(statement)] += 1
            return execute_async(statement, *a, **kw)

        monkeypatch.setattr(conn, "execute", counted)
        monkeypatch.setattr(conn, "execute_async", counted_async)

    def count(self, *fragments: str) -> int:
        return sum(n for cql, n in self.seen.items() if all(f in cql for f in fragments))

    def reset(self) -> None:
        self.seen.clear()


# -- F3: delayed rows of a skipped range ------------------------------------------------------


def test_delayed_rows_in_a_skipped_range_are_delivered_once_and_free_the_bucket(
    queue_client, queue_name
):
    """Old code (verified): repair republished only plain rows of a skipped range and readers
    pass skipped ranges, so a delayed row whose timer was never written (the old write order:
    rows, then timers) was never delivered, and the range's bucket was never finished: the
    repair pointer stayed at 0. Here id 0 is such a row, ids 1 and 2 have timers (a client's
    timer path races repair for them), one of them is held once without an ack."""
    q = queue_client
    q.create_queue(queue_name, bucket_size=10, repair_timeout=1.0, visibility_timeout=1.0)
    info = q.get_queue(queue_name)
    res = monoton.reserve(q.conn, info, 3)  # the writer dies: never closed
    assert res.lo == 0
    due = clock.now() + 3.0
    q.conn.execute(
        "INSERT INTO {ks}.messages (queue_id, bucket, id, payload, enqueued_at, visible_at) "
        "VALUES (?, 0, 0, ?, toTimestamp(now()), ?)",
        (info.queue_id, b"d0", clock.from_epoch(due)),
    )
    write_messages(q.conn, info, 1, [b"d1", b"d2"], delays=[3.0, 3.0])
    markers = q.put_many(queue_name, [f"m{i}".encode() for i in range(10)])
    time.sleep(1.3)  # the block is abandoned: the next get hands it to repair
    got = _drain(q, queue_name, 4, stop=lambda got: len(got) >= 10)
    assert sorted(m.id for m in got) == markers
    held = []

    def ack_all_but_first_d1(msg):
        if msg.payload == b"d1" and not held:
            held.append(msg)
            return False
        return True

    deliveries = []
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        deliveries += _drain(q, queue_name, 0.5, ack=ack_all_but_first_d1)
        q.repair(queue_name)
        acked = collections.Counter(m.payload for m in deliveries if m not in held)
        if sorted(acked) == [b"d0", b"d1", b"d2"] and q.stats(queue_name)["repair_pointer"] >= 1:
            break
    acked = collections.Counter(m.payload for m in deliveries if m not in held)
    assert acked == {b"d0": 1, b"d1": 1, b"d2": 1}, deliveries
    for m in deliveries:
        if m.id >= 3:  # a republished copy says where it comes from
            assert m.headers[HEADER_ORIGIN_QUEUE] == queue_name
    assert _drain(q, queue_name, 1.5) == []
    stats = q.stats(queue_name)
    assert stats["repair_pointer"] >= 1, "bucket 0 must be reclaimed"
    assert stats["backlog"] == stats["delayed"] == stats["in_flight"] == 0


def test_a_writer_dying_mid_block_leaves_no_delayed_row_without_its_timer(queue_client, queue_name):
    """Old code (verified): ``write_messages`` wrote a block's rows, then its timers; a writer
    stopped between the two left delayed rows no timer would ever bring back."""
    queue_client.create_queue(queue_name)
    info = queue_client.get_queue(queue_name)
    res = monoton.reserve(queue_client.conn, info, 5)
    faults.inject(faults.TIMEOUT_BEFORE, r"INSERT INTO \S+\.timers", times=None)
    with pytest.raises(WriteTimeout):
        write_messages(queue_client.conn, info, res.lo, [b"x"] * 5, delays=[30.0] * 5)
    faults.reset()
    rows = queue_client.conn.execute(
        "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = ?", (info.queue_id, 0)
    ).all()
    timers = queue_client.conn.execute(
        "SELECT id FROM {ks}.timers WHERE queue_id = ? AND slot = ?",
        (info.queue_id, int(clock.now() + 30)),
    ).all()
    assert {r.id for r in rows} <= {t.id for t in timers}


# -- F7: durations beyond what timers keep ------------------------------------------------------


def test_durations_beyond_the_limit_are_refused(queue_client, queue_name):
    """Old code (verified): any delay, visibility timeout or change_visibility was accepted,
    however far beyond the 14 days the timers table kept its rows."""
    queue_client.create_queue(queue_name)
    too_long = 12 * 3600 + 1
    with pytest.raises(ConfigError, match=r"delay must be at most 43200 seconds \(12 hours\)"):
        queue_client.put(queue_name, b"x", delay=too_long)
    with pytest.raises(ConfigError, match="visibility timeout must be at most"):
        queue_client.get(queue_name, visibility_timeout=too_long)
    with pytest.raises(ConfigError, match="visibility timeout must be at most"):
        queue_client.create_queue(f"{queue_name}_b", visibility_timeout=too_long)
    queue_client.put(queue_name, b"x", delay=0)
    msg = queue_client.get(queue_name)
    with pytest.raises(ConfigError, match="timeout must be at most"):
        queue_client.change_visibility(queue_name, msg.pop_receipt, too_long)
    with pytest.raises(ConfigError, match="repair timeout must be at most"):
        queue_client.create_queue(f"{queue_name}_c", repair_timeout=2 * 86400)
    with pytest.raises(ConfigError, match="longer than the maximum"):
        write_messages(queue_client.conn, queue_client.get_queue(queue_name), 10**9, [b"x"],
                       delays=[too_long])  # fmt: skip
    queue_client.put(queue_name, b"x", delay=12 * 3600)  # the limit itself is fine


TIMERS_TTL = 5  # stands for the 14 days of the real schema


@pytest.fixture
def short_timer_client(cassandra, cassieq_options):
    """A client of a keyspace of its own whose timers table keeps rows ``TIMERS_TTL`` s."""
    ks = f"cq_timers_{uuid.uuid4().hex[:10]}"
    admin = QueueClient.from_options({**cassieq_options, "keyspace": ks})
    admin.bootstrap(create_keyspace=True)
    for table in ("timers", "timer_slots"):
        admin.conn.session.execute(
            f"ALTER TABLE {ks}.{table} WITH default_time_to_live = {TIMERS_TTL}"
        )
    admin.conn.cluster.control_connection.wait_for_schema_agreement()
    client = QueueClient.from_options({**cassieq_options, "keyspace": ks})
    try:
        yield client
    finally:
        client.close()
        admin.conn.session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
        admin.close()


def test_timers_outlive_their_due_time_by_the_retention(short_timer_client):
    """Old code (verified): a timer lived the table TTL from its *write*: a delay longer than
    that, or consumers away for longer than what was left of it after the due time, and the
    message never came back (here: none of the three). Now a timer lives the retention (the
    table TTL) after it is due."""
    q = short_timer_client
    q.create_queue("warm")  # statements prepared before the timed part
    q.put("warm", b"w", delay=0.01)
    time.sleep(0.1)
    q.ack("warm", q.get("warm").pop_receipt)
    q.create_queue("q")
    first = time.monotonic()
    x = q.put("q", b"x")
    q.put("q", b"short", delay=3.0)  # comes back only through its timer
    q.put("q", b"late", delay=TIMERS_TTL + 3.0)  # due after the table TTL
    msg = q.get("q", visibility_timeout=3.0)
    assert msg.id == x  # held, not acked
    assert q.get("q") is None  # the reader passes the delayed ones
    last = time.monotonic()
    assert last - first < 1.5, "too slow to show anything"
    # Every consumer is away until every timer written so far is past the table TTL.
    time.sleep(last + TIMERS_TTL + 0.5 - time.monotonic())
    got = _drain(q, "q", 4, stop=lambda got: len(got) >= 3)
    assert sorted(m.payload for m in got) == [b"late", b"short", b"x"]


# -- F6: LOCAL_SERIAL across data centers ---------------------------------------------------------


@pytest.fixture
def one_dc_keyspace(cassandra):
    """A keyspace replicated with NetworkTopologyStrategy to this node's data center."""
    session = cassandra.session()
    local_dc = session.execute("SELECT data_center FROM system.local").one().data_center
    ks = f"cq_nts_{uuid.uuid4().hex[:10]}"
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = "
        f"{{'class': 'NetworkTopologyStrategy', '{local_dc}': 1}}"
    )
    try:
        yield ks, local_dc
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {ks}")


def test_local_serial_is_refused_for_a_keyspace_in_two_data_centers(
    cassieq_options, one_dc_keyspace
):
    """Old code (by reading, and verified that it connects): nothing looked at replication,
    so LOCAL_SERIAL/LOCAL_QUORUM (the defaults) ran one Paxos per data center: two writers
    reserve the same ids, two consumers claim the same message.

    Cassandra 5 refuses a replication map naming a data center it has never seen
    (CASSANDRA-12681), so on this one-node cluster the second data center is declared in the
    driver's schema metadata of a live connection, as a schema refresh would after
    ``ALTER KEYSPACE .. 'dc2': 1`` on a real two-DC cluster; the check is the one
    ``Connection`` runs at connect time and ``bootstrap`` runs again."""
    from cassandra.metadata import KeyspaceMetadata

    from cassieq_spark.config import check_cluster

    ks, local_dc = one_dc_keyspace
    opts = {**cassieq_options, "keyspace": ks}
    with QueueClient.from_options(opts) as client:  # one data center: LOCAL_* are fine
        client.bootstrap()
        metadata = client.conn.cluster.metadata
        assert ks in metadata.keyspaces
        check_cluster(client.config, metadata)
        two_dc = KeyspaceMetadata(ks, True, "NetworkTopologyStrategy", {local_dc: "1", "dc2": "1"})
        metadata.keyspaces[ks] = two_dc
        for extra, named in (
            ({}, "serialConsistency LOCAL_SERIAL"),
            ({"consistency": "QUORUM"}, "serialConsistency LOCAL_SERIAL"),
            ({"serialConsistency": "SERIAL"}, "consistency LOCAL_QUORUM"),
        ):
            config = connection_from_options({**opts, **extra})
            with pytest.raises(
                ConfigError, match=f"data centers .*dc2.*{named}.*use serialConsistency=SERIAL"
            ):
                check_cluster(config, metadata)
        ok = connection_from_options(
            {**opts, "consistency": "QUORUM", "serialConsistency": "SERIAL"}
        )
        check_cluster(ok, metadata)
        # bootstrap checks the keyspace (maybe just created) again; no DDL left to run here
        with pytest.raises(ConfigError, match="LOCAL_SERIAL"):
            client.bootstrap()


# -- F13: a dead-letter queue that does not exist -----------------------------------------------


def test_missing_dead_letter_queue_is_refused_at_creation(queue_client, queue_name):
    """Old code (verified): created; the first message over the limit then stopped the queue."""
    with pytest.raises(QueueNotFoundError, match="dead-letter queue .* does not exist"):
        queue_client.create_queue(queue_name, dead_letter_queue=f"{queue_name}_missing")
    with pytest.raises(QueueNotFoundError):
        queue_client.get_queue(queue_name)


def test_deleted_dead_letter_queue_drops_the_message_and_keeps_serving(queue_client, queue_name):
    """Old code (verified): every get() after the first message over the limit raised
    QueueNotFoundError for the deleted dead-letter queue, for good."""
    q = queue_client
    dlq = f"{queue_name}_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, max_delivery_count=1, dead_letter_queue=dlq)
    poison = q.put(queue_name, b"poison")
    assert q.get(queue_name, visibility_timeout=0.5).id == poison
    q.delete_queue(dlq)
    time.sleep(1.0)
    assert q.get(queue_name) is None  # the poison message is dropped, not an error
    ids = q.put_many(queue_name, [b"ok"] * 10)
    got = _drain(q, queue_name, 5, stop=lambda got: len(got) >= 10)
    assert sorted(m.id for m in got) == ids
    stats = q.stats(queue_name)
    assert stats["dropped"] == 1 and stats["dead_lettered"] == 0


# -- F15: dead letter versus a late ack -----------------------------------------------------------


def _poison(q, name, dlq):
    q.create_queue(dlq)
    q.create_queue(name, max_delivery_count=1, dead_letter_queue=dlq)
    mid = q.put(name, b"poison")
    msg = q.get(name, visibility_timeout=0.5)
    assert msg.id == mid
    time.sleep(1.0)
    return msg


def test_late_ack_while_the_copy_is_written_leaves_one_outcome(
    queue_client, queue_name, monkeypatch
):
    """Old code (verified): the copy went to the dead-letter queue first, the original was
    marked dead second; the holder's late ack in between applied, the mark failed: the message
    was processed *and* in the dead-letter queue."""
    q = queue_client
    dlq = f"{queue_name}_dlq"
    msg = _poison(q, queue_name, dlq)
    late_ack = []
    from cassieq_spark.engine.write import producer

    real = producer.enqueue

    def enqueue_after_a_late_ack(*a, key=None, **kw):
        if key and key.startswith("dlq:") and not late_ack:
            late_ack.append(q.ack(queue_name, msg.pop_receipt))
        return real(*a, key=key, **kw)

    # Wherever the dead-letter copy is enqueued from (the client before the fix, the engine's
    # deadletter module after it).
    for where in ("cassieq_spark.client", "cassieq_spark.engine.upkeep.deadletter"):
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        monkeypatch.setattr(module, "enqueue", enqueue_after_a_late_ack, raising=False)
    assert q.get(queue_name) is None
    assert late_ack, "the dead-letter copy was never written"
    copies = _drain(q, dlq, 2)
    assert not (late_ack[0] and copies), "acked and dead-lettered"
    assert len(copies) == (0 if late_ack[0] else 1)
    stats = q.stats(queue_name)
    assert stats["dead_lettered"] == len(copies) and stats["acked"] == int(late_ack[0])


def test_ack_before_the_mark_wins(queue_client, queue_name):
    """The other order: the ack lands before the dead-letter mark. The message stays acked and
    nothing reaches the dead-letter queue. (The fault point is new; by reading, the old code
    wrote the copy whatever the ack, so this order also ended acked *and* dead-lettered.)"""
    q = queue_client
    dlq = f"{queue_name}_dlq"
    msg = _poison(q, queue_name, dlq)
    acked = []
    faults.on(
        "deadletter.before_mark", lambda **ctx: acked.append(q.ack(queue_name, msg.pop_receipt))
    )
    assert q.get(queue_name) is None
    assert acked == [True]
    assert _drain(q, dlq, 1.5) == []
    assert q.stats(queue_name)["dead_lettered"] == 0


@pytest.mark.parametrize("finisher", ["get", "repair"])
def test_crash_between_mark_and_copy_is_finished_once(queue_client, queue_name, finisher):
    """A consumer that dies after marking the original dead and before writing the copy: the
    next get (timer path) or repair (before it reclaims the bucket) writes the copy, once.
    (New state; the old code had no such step.)"""
    q = queue_client
    dlq = f"{queue_name}_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, max_delivery_count=1, dead_letter_queue=dlq, bucket_size=1)
    mid = q.put(queue_name, b"poison")
    held = q.get(queue_name, visibility_timeout=30)
    assert held is not None
    q.change_visibility(queue_name, held.pop_receipt, 0)  # due again, one delivery counted

    def crash(**ctx):
        raise RuntimeError("consumer killed")

    faults.on("deadletter.marked", crash)
    with pytest.raises(RuntimeError, match="killed"):
        q.get(queue_name)
    faults.reset()
    info = q.get_queue(queue_name)
    assert _row(q, info, mid, "dead, moved") == (True, "dlq")
    if finisher == "get":
        assert q.get(queue_name) is None
    else:
        assert q.repair(queue_name).repair_pointer >= 1
    copies = _drain(q, dlq, 2)
    assert [(m.payload, m.headers[HEADER_ORIGIN_ID]) for m in copies] == [(b"poison", str(mid))]
    assert q.get(queue_name) is None
    q.repair(queue_name)
    assert _drain(q, dlq, 1) == []
    assert q.stats(queue_name)["dead_lettered"] == 1


def test_two_finishers_count_the_dead_letter_once(queue_client, queue_name, monkeypatch):
    """Found with CASSIEQ_FAULTS=lost-reply (by running the F22 workload: 61 dead letters
    counted for 40). Two consumers finish one half-done dead-letter move at once; the reply
    of the loser's compare-and-set is lost and its read-back used to see the move finished
    and count it again. Now the finishing write carries a token."""
    from cassieq_spark.engine.upkeep import deadletter

    q = queue_client
    dlq = f"{queue_name}_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, max_delivery_count=1, dead_letter_queue=dlq)
    mid = q.put(queue_name, b"poison")
    q.get(queue_name, visibility_timeout=0.5)
    time.sleep(1.0)
    faults.on("deadletter.marked", lambda **ctx: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError, match="killed"):
        q.get(queue_name)
    faults.reset()
    info = q.get_queue(queue_name)
    faults.inject(faults.LOST_REPLY, r"SET moved = \?", times=None)
    execute = q.conn.execute
    raced = []

    def another_finisher_first(statement, *a, **kw):
        cql = statement if isinstance(statement, str) else ""
        if "SET moved = ?" in cql and not raced:
            raced.append(True)
            deadletter.complete(q.conn, q.counters, info, mid)
        return execute(statement, *a, **kw)

    monkeypatch.setattr(q.conn, "execute", another_finisher_first)
    deadletter.complete(q.conn, q.counters, info, mid)
    monkeypatch.undo()
    assert raced
    assert [m.payload for m in _drain(q, dlq, 2)] == [b"poison"]
    assert q.stats(queue_name)["dead_lettered"] == 1


# -- claims settled after a lost reply -------------------------------------------------------------


def test_lost_claim_reply_is_not_taken_for_a_win(queue_client, queue_name, monkeypatch):
    """Found while running these tests with CASSIEQ_FAULTS=lost-reply. Old code (verified):
    a claim whose reply was lost was settled by reading version and ``invisible_until``; a
    consumer that lost the race to another one claiming with the same due time (same clock
    millisecond, same visibility timeout) read the winner's claim as its own: both delivered
    the message at one version, both acks applied. The claim now carries a token."""
    import datetime as dt

    q = queue_client
    q.create_queue(queue_name)
    mid = q.put(queue_name, b"x")
    other = QueueClient(q.config, connection=q.conn)
    other.get_queue(queue_name)  # cached: its get reads the clock first thing
    faults.inject(faults.LOST_REPLY, r"SET version = \?, deliveries", times=None)
    execute = q.conn.execute
    seen = []

    def other_claims_first(statement, params=(), *a, **kw):
        cql = statement if isinstance(statement, str) else ""
        if "SET version = ?, deliveries" in cql and not seen:
            seen.append(None)
            due = next(p for p in params if isinstance(p, dt.datetime))
            # The other consumer's clock reads what ours read: both claims due in the same ms.
            faults.set_skew(clock.to_epoch(due) - 30 - time.time())
            seen[0] = other.get(queue_name, visibility_timeout=30)
            faults.set_skew(0)
        return execute(statement, params, *a, **kw)

    monkeypatch.setattr(q.conn, "execute", other_claims_first)
    mine = q.get(queue_name, visibility_timeout=30)
    theirs = seen[0]
    assert theirs is not None and theirs.id == mid
    assert mine is None, "both consumers hold the message"
    assert q.ack(queue_name, theirs.pop_receipt)


# -- F18: the cost of a get -------------------------------------------------------------------------


def test_get_reads_a_bounded_window_of_a_large_due_slot(queue_client, queue_name, monkeypatch):
    """Old code (verified): every get read every unacked id of every due slot (2000 reads per
    get here, all in flight at once). Now a window at a time, and ids known to be held are not
    read again before they are due."""
    q = queue_client
    q.create_queue(queue_name)
    n = 2000
    due = time.monotonic() + 5.0
    q.put_many(queue_name, [b"d"] * n, delay=5.0)
    assert q.get(queue_name) is None  # the reader passes them
    time.sleep(max(0.0, due - time.monotonic()) + 1.2)
    counting = _Counting(monkeypatch, q.conn)
    reads = []
    for _ in range(40):
        counting.reset()
        msg = q.get(queue_name, visibility_timeout=60)  # held: never acked here
        assert msg is not None
        reads.append(counting.count("SELECT", ".messages WHERE", "id = ?"))
    assert max(reads) <= 64 + 8, reads


def test_lost_claims_are_bounded_per_get(queue_client, queue_name, monkeypatch):
    """Old code (verified): a get that lost its races tried every due timer row (here 500
    Paxos rounds, each leaving an orphan timer), then up to a chunk of fresh candidates.
    Every claim here is lost: the request never reaches a coordinator."""
    q = queue_client
    q.create_queue(queue_name)
    due = time.monotonic() + 4.0
    q.put_many(queue_name, [b"d"] * 500, delay=4.0)
    assert q.get(queue_name) is None
    q.put_many(queue_name, [b"p"] * 500)
    time.sleep(max(0.0, due - time.monotonic()) + 1.2)
    counting = _Counting(monkeypatch, q.conn, lose=lambda cql: "SET version = ?, deliveries" in cql)
    assert q.get(queue_name) is None
    claims = counting.count("SET version = ?, deliveries")
    timers = counting.count(".timers (queue_id, slot, id)")
    assert 0 < claims <= 16 and timers <= 16, (claims, timers)


# -- F19: message TTL --------------------------------------------------------------------------------


def test_expired_in_flight_message_never_comes_back_empty(queue_client, queue_name):
    """Old code (verified): the claim's cells had no TTL, so after the message TTL the row kept
    them and the timer path delivered it again with an empty payload."""
    q = queue_client
    q.create_queue(queue_name, message_ttl=2, visibility_timeout=1.0)
    info = q.get_queue(queue_name)
    mid = q.put(queue_name, b"short-lived")
    assert q.get(queue_name).payload == b"short-lived"  # held, never acked
    time.sleep(3.0)
    assert _drain(q, queue_name, 2.5) == []
    assert _row(q, info, mid) is None  # every cell expired with the payload
    stats = q.stats(queue_name)
    assert stats["in_flight"] == stats["backlog"] == 0


def test_acked_cell_expires_with_the_message(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, message_ttl=2, bucket_size=10)
    info = q.get_queue(queue_name)
    mid = q.put(queue_name, b"x")
    assert q.ack(queue_name, q.get(queue_name).pop_receipt)
    time.sleep(2.5)
    assert _row(q, info, mid) is None


# -- F23: the largest message --------------------------------------------------------------------------


def test_largest_allowed_message_fits_in_one_mutation(queue_client, queue_name):
    """Old code (verified): max_payload_bytes up to 16 MiB was accepted, Cassandra's mutation
    and frame limit: such a message was refused at put time. Headers had no size limit."""
    from cassieq_spark.engine.core.queues import MAX_PAYLOAD_LIMIT

    with pytest.raises(ConfigError, match="max payload bytes"):
        queue_client.create_queue(queue_name, max_payload_bytes=16 * 1024 * 1024)
    queue_client.create_queue(queue_name, max_payload_bytes=MAX_PAYLOAD_LIMIT)
    big = b"x" * MAX_PAYLOAD_LIMIT
    headers = {"h": "y" * (64 * 1024 - 1)}
    with pytest.raises(ConfigError, match="headers take"):
        queue_client.put(queue_name, b"x", headers={"h": "y" * (64 * 1024)})
    mid = queue_client.put(queue_name, big, headers=headers)
    msg = queue_client.get(queue_name)
    assert msg.id == mid and msg.payload == big and msg.headers == headers


# -- F22: storage bounded by what is in flight, not by history ----------------------------------


@pytest.mark.parametrize("fault_mode", ["lost-reply"], indirect=True)
def test_storage_stays_bounded_whatever_the_history(own_keyspace_client, monkeypatch, capsys):
    """Each table holds what is in flight plus a bucket or so, whatever the history: skipped
    ranges and their reservation rows are deleted, timers and slot markers once resolved,
    repair and dead-letter keys once used. 2,000 messages here, once, with every
    compare-and-set's reply lost (the same writes as without, plus every settling read);
    10,000 and 100,000 without faults in tests/long/test_storage_bound_long.py."""
    check_storage_stays_bounded(own_keyspace_client, 2_000, monkeypatch, capsys)
