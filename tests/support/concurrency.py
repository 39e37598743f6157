"""Many producer and consumer *processes* on one queue, against the real Cassandra.

Every delivery is recorded (id, receipt version, times, consumer); the test then checks that
every message was acked exactly once, none was lost, and no message was ever held by two
consumers at once.

A delivery's window is an *inner* bound of the time its consumer really held the message:
from just after ``get`` returned (the claim happened before) to the earlier of just before
``ack`` was called and (just before ``get`` was called + visibility timeout) (the claim's
timeout started after that). Windows of the same id from different consumers must not overlap.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import threading
import time

from cassieq_spark import QueueClient
from cassieq_spark.engine.core.receipts import PopReceipt

PRODUCERS = 4
CONSUMERS = 4
THREADS_PER_CONSUMER = int(os.environ.get("CASSIEQ_TEST_CONSUMER_THREADS", "2"))
BATCH = 200
SINGLE_PUTS = 50  # per producer, one id reservation each
VISIBILITY = 30.0
DEADLINE = 600.0


def _produce(options: dict, queue: str, index: int, count: int) -> list[int]:
    ids: list[int] = []
    with QueueClient.from_options(options) as client:
        payloads = [f"{index}:{i}" for i in range(count)]
        singles, batched = payloads[:SINGLE_PUTS], payloads[SINGLE_PUTS:]
        for p in singles:
            ids.append(client.put(queue, p))
        for start in range(0, len(batched), BATCH):
            ids.extend(client.put_many(queue, batched[start : start + BATCH]))
    return ids


def _consume_thread(client, queue, who, done_producing, records) -> None:
    idle_since = None
    started = time.monotonic()
    while time.monotonic() - started < DEADLINE:
        t0 = time.time()
        msg = client.get(queue, visibility_timeout=VISIBILITY)
        t1 = time.time()
        if msg is None:
            if done_producing.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 3.0:
                    return
            time.sleep(0.05)
            continue
        idle_since = None
        version = PopReceipt.decode(msg.pop_receipt).version
        t2 = time.time()
        acked = client.ack(queue, msg.pop_receipt)
        t3 = time.time()
        records.append((msg.id, version, t0, t1, t2, t3, acked, who, msg.payload))


def _consume(options: dict, queue: str, index: int, done_producing) -> list[tuple]:

    records: list[tuple] = []
    with QueueClient.from_options(options) as client:
        threads = [
            threading.Thread(
                target=_consume_thread,
                args=(client, queue, f"{index}.{t}", done_producing, records),
            )
            for t in range(THREADS_PER_CONSUMER)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return records


def check_producers_and_consumers(
    cassieq_options: dict, queue_client: QueueClient, queue_name: str, messages: int
) -> None:
    """``PRODUCERS`` producer and ``CONSUMERS`` consumer processes share a new queue until
    ``messages`` messages are acked; asserts every id acked exactly once, payloads intact, no two
    consumers holding one message at once, and the queue's statistics."""
    queue_client.create_queue(queue_name, visibility_timeout=VISIBILITY, bucket_size=1000)
    per = messages // PRODUCERS
    ctx = mp.get_context("spawn")
    started = time.monotonic()
    with ctx.Manager() as manager:
        done_producing = manager.Event()
        with ctx.Pool(PRODUCERS + CONSUMERS) as pool:
            consumers = [
                pool.apply_async(_consume, (cassieq_options, queue_name, i, done_producing))
                for i in range(CONSUMERS)
            ]
            producers = [
                pool.apply_async(_produce, (cassieq_options, queue_name, i, per))
                for i in range(PRODUCERS)
            ]
            produced = [p.get(timeout=DEADLINE) for p in producers]
            produced_at = time.monotonic()
            done_producing.set()
            records = [r for c in consumers for r in c.get(timeout=DEADLINE)]
    elapsed = time.monotonic() - started

    all_ids = [i for ids in produced for i in ids]
    assert len(all_ids) == messages == len(set(all_ids)), "ids must be unique across producers"
    for ids in produced:
        assert ids == sorted(ids), "ids of one producer increase monotonically"

    acks = collections.Counter(r[0] for r in records if r[6])
    missing = set(all_ids) - set(acks)
    assert not missing, f"{len(missing)} messages never acked, e.g. {sorted(missing)[:5]}"
    twice = [i for i, n in acks.items() if n > 1]
    assert not twice, f"acked more than once: {twice[:5]}"
    assert set(acks) == set(all_ids)

    # Payloads arrive intact with their ids.
    expected = {}
    for index, ids in enumerate(produced):
        for seq, mid in enumerate(ids):
            expected[mid] = f"{index}:{seq}".encode()
    assert all(r[8] == expected[r[0]] for r in records)

    # No message in flight with two consumers at once.
    by_id = collections.defaultdict(list)
    for mid, version, t0, t1, t2, _t3, _acked, who, _ in records:
        by_id[mid].append((t1, min(t2, t0 + VISIBILITY), version, who))
    overlaps = []
    for mid, windows in by_id.items():
        windows.sort()
        versions = [w[2] for w in windows]
        assert len(set(versions)) == len(versions), f"id {mid}: receipt version handed out twice"
        for i, a in enumerate(windows):
            for b in windows[i + 1 :]:
                if a[3] != b[3] and b[0] < a[1]:
                    overlaps.append((mid, a, b))
    assert not overlaps, f"{len(overlaps)} overlapping deliveries, e.g. {overlaps[:3]}"

    stats = queue_client.stats(queue_name)
    assert stats["enqueued"] == messages
    assert stats["acked"] == messages
    assert stats["backlog"] == stats["in_flight"] == stats["delayed"] == 0

    deliveries = len(records)
    consume_s = max(r[5] for r in records) - min(r[2] for r in records)
    print(
        f"\n{messages} messages, {PRODUCERS} producers, {CONSUMERS}x{THREADS_PER_CONSUMER} consumers: "
        f"total {elapsed:.1f}s, producing {produced_at - started:.1f}s, "
        f"{deliveries} deliveries ({deliveries - messages} redeliveries), "
        f"get+ack {deliveries / consume_s:.0f}/s"
    )
