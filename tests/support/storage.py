"""Storage bounded by what is in flight, not by history: a workload that puts messages through
every path of a queue, and the count of live rows per table after it (protocol finding F22; run
at 2,000 messages in tests/integration, 10,000 and 100,000 in tests/long)."""

from __future__ import annotations

import collections
import threading
import time

from cassieq_spark import QueueClient
from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import write_messages

GROWTH_TABLES = ("messages", "monoton", "skipped", "timers", "timer_slots", "reservation_keys")
GROWTH_BUCKET = 100
VISIBILITY = 5.0


def _live_rows(client) -> dict[str, int]:
    ks = client.config.keyspace
    out = {}
    for table in GROWTH_TABLES:
        if table == "monoton":  # reservation rows, not the counter (a static row per queue)
            rows = client.conn.session.execute(f"SELECT lo FROM {ks}.monoton")
            out[table] = sum(1 for r in rows if r.lo is not None)
        else:
            out[table] = client.conn.session.execute(f"SELECT COUNT(*) FROM {ks}.{table}").one()[0]
    return out


class _Workload:
    """Every way a message goes through the queue, ~1000 messages a round, consumed by a few
    clients at once (each its own consumer state, one connection)."""

    CONSUMERS = 3

    def __init__(self, client, name: str, dlq: str):
        self.q, self.name, self.dlq = client, name, dlq
        self.info = client.get_queue(name)
        self.want: set[bytes] = set()  # to be acked once in the queue
        self.want_dead: set[bytes] = set()  # to be acked once in the dead-letter queue
        self.acked: collections.Counter = collections.Counter()
        self.acked_dead: collections.Counter = collections.Counter()
        self.held_once: set[bytes] = set()
        self.lock = threading.Lock()
        self.repaired_at = 0.0
        self.clients = [QueueClient(client.config, connection=client.conn) for _ in range(3)]

    def produce(self, r: int) -> None:
        q, name = self.q, self.name
        p = [f"{r}:{i}:ok".encode() for i in range(890)]
        p += [f"{r}:{i}:once".encode() for i in range(20)]  # delivered, expires, delivered
        p += [f"{r}:{i}:poison".encode() for i in range(4)]  # never acked: dead letter
        q.put_many(name, p)
        late = [f"{r}:{i}:late".encode() for i in range(50)]
        q.put_many(name, late, delay=0.5)
        single = [f"{r}:{i}:single".encode() for i in range(20)]
        for payload in single:
            q.put(name, payload)
        # A writer that dies half way through its block: readers pass it, repair republishes.
        res = monoton.reserve(q.conn, self.info, 10)
        dying = [f"{r}:{i}:abandoned".encode() for i in range(6)]
        write_messages(q.conn, self.info, res.lo, dying)
        with self.lock:
            self.want |= {x for x in p + late + single + dying if not x.endswith(b"poison")}
            self.want_dead |= {x for x in p if x.endswith(b"poison")}

    def outstanding(self) -> int:
        with self.lock:
            return len(self.want - set(self.acked)) + len(self.want_dead - set(self.acked_dead))

    def consume(self, seconds: float, leave: int = 0) -> None:
        """Consume until at most ``leave`` messages are outstanding (stragglers: expired
        deliveries, dead letters, repaired blocks; the next round overlaps them)."""
        deadline = time.monotonic() + seconds
        threads = [
            threading.Thread(target=self._consumer, args=(c, deadline, leave)) for c in self.clients
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if leave == 0:
            missing = sorted(self.want - set(self.acked))
            missing_dead = sorted(self.want_dead - set(self.acked_dead))
            assert not missing and not missing_dead, (len(missing), missing[:3], missing_dead[:3])
        assert max(self.acked.values()) == 1, "acked twice"
        assert not self.acked_dead or max(self.acked_dead.values()) == 1

    def _consumer(self, q, deadline: float, leave: int) -> None:
        while self.outstanding() > leave and time.monotonic() < deadline:
            # A visibility timeout far longer than a get and an ack take on a loaded machine:
            # an ack racing the message's redelivery may both apply (the documented ack window).
            msg = q.get(self.name, visibility_timeout=VISIBILITY)
            if msg is not None:
                kind = msg.payload.rsplit(b":", 1)[1]
                with self.lock:
                    first = kind == b"once" and msg.payload not in self.held_once
                    self.held_once.add(msg.payload)
                if kind == b"poison" or first:
                    # Not processed: it comes back through its timer soon (an expired delivery).
                    q.change_visibility(self.name, msg.pop_receipt, 0.2)
                    continue
                if q.ack(self.name, msg.pop_receipt):
                    with self.lock:
                        self.acked[msg.payload] += 1
                continue
            dead = q.get(self.dlq, visibility_timeout=VISIBILITY)
            if dead is not None:
                if q.ack(self.dlq, dead.pop_receipt):
                    with self.lock:
                        self.acked_dead[dead.payload] += 1
                continue
            with self.lock:
                repair = time.monotonic() - self.repaired_at > 0.5
                if repair:
                    self.repaired_at = time.monotonic()
            if repair:
                q.repair(self.name)
                q.repair(self.dlq)
            else:
                time.sleep(0.05)


def check_storage_stays_bounded(q, n: int, monkeypatch, capsys) -> None:
    """Put ``n`` messages through every path of a queue (put, put_many, delays, expiring
    deliveries, dead letters, abandoned reservations, repair) on the client ``q`` of a keyspace
    of its own, printing the live rows of each table every 10,000 messages; then, at rest, every
    table holds at most what is in flight plus a bucket or so, whatever ``n``.

    (Timers are deleted once well behind the invisibility pointer: here 8 slots instead of
    the real margin of a minute, so that the test need not wait.)"""
    from cassieq_spark.engine.core import timers

    monkeypatch.setattr(timers, "RECLAIM_LAG_SLOTS", 8, raising=False)
    q.create_queue("dlq", bucket_size=GROWTH_BUCKET, repair_timeout=0.5)
    q.create_queue(
        "q",
        bucket_size=GROWTH_BUCKET,
        repair_timeout=0.5,
        max_delivery_count=2,
        dead_letter_queue="dlq",
    )
    work = _Workload(q, "q", "dlq")
    started = time.monotonic()
    figures = []
    rounds = n // 1000
    for r in range(rounds):
        work.produce(r)
        work.consume(120, leave=0 if r == rounds - 1 else 150)
        if r % 10 == 9 or r == rounds - 1:
            figures.append((r + 1, _live_rows(q)))
    # Idle for longer than the last visibility timeout, the settle window and the timer
    # margin, then one more pass.
    time.sleep(VISIBILITY + 16)
    assert q.get("q") is None and q.get("dlq") is None
    for _ in range(3):
        q.repair("q")
        q.repair("dlq")
    final = _live_rows(q)
    with capsys.disabled():
        print(f"\nF22 live rows, {n} messages in {time.monotonic() - started:.0f} s:")
        for rounds, rows in figures:
            print(f"  after {rounds * 1000:>7} messages: {rows}")
        print(f"  at rest:               {final}")
    stats = q.stats("q")
    assert stats["backlog"] == stats["in_flight"] == stats["delayed"] == 0
    assert stats["dead_lettered"] == len(work.want_dead)
    bound = {
        "messages": 2 * 2 * GROWTH_BUCKET,  # per queue: the bucket holding the reader, one more
        "monoton": 4,
        "skipped": 4,
        "timers": 0,  # all due long ago: read, resolved, and deleted
        "timer_slots": 0,
        "reservation_keys": 2 * GROWTH_BUCKET // 10,
    }
    over = {t: (final[t], bound[t]) for t in bound if final[t] > bound[t]}
    assert not over, f"more live rows than the bound (found, bound): {over}"
