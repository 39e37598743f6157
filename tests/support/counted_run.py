"""One client process of the counted run with late timer writes and lost replies
(tests/system/test_counted_run_with_late_timers_and_lost_replies.py).

The process puts its share of the messages and consumes from the shared queue at once, with
``CASSIEQ_FAULTS=lost-reply:writes:RATE:SEED`` (a share of every write's replies lost, plain
and conditional, after the write applied) and a share of its timer writes held at the fault
seam's point ``timers.before_write`` for up to three visibility timeouts (the writing thread
only). Everything it did is written to its log, one JSON list a line, each ending with the
time it was written (``time.time()``: the processes share the machine's clock):

* ``["P", payloads, ids]``: a put that returned; ``["PX", payloads, error]``: one that raised;
* ``["D", payload, id, delivery_count, receiver, started]``: a delivery (``started``: when
  the receive began, whence its visibility timeout counts);
* ``["A", payload, id, outcome, receiver]``: its ack (``true``, ``false``: stale,
  ``"raised"``);
* ``["R", payload, id, outcome, receiver]``: a release (``change_visibility(..., 0)``, or
  ``give_back``), ``"ok"``, ``"stale"`` or ``"raised"``;
* ``["T", seconds]``: a timer write held; ``["X", call, error]``: a receive that raised;
* ``["S", seed]``: the seeds, first.
"""

from __future__ import annotations

import collections
import json
import logging
import multiprocessing as mp
import os
import random
import threading
import time
import uuid
from pathlib import Path

from cassieq_spark.client import QueueClient
from cassieq_spark.errors import StaleReceiptError

log = logging.getLogger(__name__)

PUT_CHUNK = 10
GROUPS = 30
GROUPED_SHARE = 0.2
DELAYED_TIMER_SHARE = 0.05
RELEASE_SHARE = 0.03
GIVE_BACK_SHARE = 0.02


PROCESSES = 3
VT = 1.0
RATE = 0.05  # the share of write replies lost
BUCKET = 100
REPAIR_TIMEOUT = 5.0
IDLE = 3 * VT + 7.0  # past any held timer write plus a late change's delay
FINAL_IDLE = 4.0


class Log:
    def __init__(self, path: str):
        self._out = open(path, "a", buffering=1)  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()

    def __call__(self, *entry) -> None:
        line = json.dumps([*entry, time.time()])
        with self._lock:
            self._out.write(line + "\n")

    def close(self) -> None:
        self._out.close()


def run(
    options: dict,
    queue: str,
    who: int,
    log_path: str,
    vt: float,
    messages: int,
    seed: int,
    rate: float,
    done_path: str,
    idle_seconds: float,
    deadline: float = 240.0,
) -> None:
    """Put ``messages`` messages and consume (two threads) until the producers of every
    process are done (``done_path`` exists) and nothing came for ``idle_seconds``."""
    from cassieq_spark.engine.core import timers
    from cassieq_spark.engine.store import faults

    os.environ[faults.ENV] = f"lost-reply:writes:{rate}:{seed}"
    faults.reset()
    log = Log(log_path)
    log("S", seed)
    held = random.Random(seed + 1)
    held_lock = threading.Lock()

    def hold_timer_write(**_context) -> None:
        with held_lock:
            seconds = held.uniform(0, 3 * vt) if held.random() < DELAYED_TIMER_SHARE else 0.0
        if seconds:
            log("T", round(seconds, 3))
            time.sleep(seconds)

    faults.on(timers.BEFORE_WRITE, hold_timer_write)
    end = time.monotonic() + deadline
    produced = threading.Event()
    with QueueClient.from_options(options) as client:

        def produce() -> None:
            rng = random.Random(seed + 2)
            try:
                for at in range(0, messages, PUT_CHUNK):
                    payloads = [f"{who}-{i}" for i in range(at, min(messages, at + PUT_CHUNK))]
                    group = f"g{rng.randrange(GROUPS)}" if rng.random() < GROUPED_SHARE else None
                    try:
                        ids = client.put_many(queue, payloads, group=group)
                    except Exception as exc:  # a lost reply the put could not settle
                        log("PX", payloads, repr(exc)[:200])
                        continue
                    log("P", payloads, ids)
            finally:
                produced.set()
                Path(f"{done_path}.{who}").touch()

        def consume(name: str) -> None:
            rng = random.Random(seed + 3 + int(name.split(".")[1]))
            last = time.monotonic()
            turn = 0
            while time.monotonic() < end:
                everyone_done = (
                    all(Path(f"{done_path}.{i}").exists() for i in range(3)) and produced.is_set()
                )
                if everyone_done and time.monotonic() - last > idle_seconds:
                    return
                turn += 1
                started = time.time()  # the receive's visibility timeouts count from here
                try:
                    if turn % 3:
                        got = client.get_many(queue, max_messages=10, visibility_timeout=vt)
                    else:
                        one = client.get(queue, visibility_timeout=vt)
                        got = [one] if one is not None else []
                except Exception as exc:
                    log("X", "get", repr(exc)[:200])
                    continue
                if not got:
                    time.sleep(0.05)
                    continue
                last = time.monotonic()
                for m in got:  # all at once, when the receive returned
                    log("D", m.payload.decode(), m.id, m.delivery_count, name, started)
                for m in got:
                    payload = m.payload.decode()
                    draw = rng.random()
                    if draw < RELEASE_SHARE + GIVE_BACK_SHARE:
                        try:
                            if draw < RELEASE_SHARE:
                                client.change_visibility(queue, m.pop_receipt, 0)
                                outcome = "ok"
                            else:
                                outcome = "ok" if client.give_back(queue, [m]) else "stale"
                        except StaleReceiptError:
                            outcome = "stale"
                        except Exception:
                            outcome = "raised"
                        log("R", payload, m.id, outcome, name)
                        continue
                    try:
                        acked: object = client.ack(queue, m.pop_receipt)
                    except Exception:
                        acked = "raised"
                    log("A", payload, m.id, acked, name)

        threads = [threading.Thread(target=produce)] + [
            threading.Thread(target=consume, args=(f"{who}.{n}",)) for n in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    log.close()


def _entries(paths) -> list:
    """Every process's log entries, in the order they were written (their last field)."""
    out = []
    for path in paths:
        if path.exists():
            out.extend(json.loads(line) for line in path.read_text().splitlines())
    return sorted(out, key=lambda e: e[-1])


def count_a_run(
    queue_client, cassieq_options, tmp_path, messages: int, record: Path | None = None
) -> dict:
    """Run the three processes on ``messages`` messages, drain, count, append the summary to
    ``record`` (if given), assert; the summary."""
    seed = int(os.environ.get("COUNTED_RUN_SEED", random.SystemRandom().randrange(2**31)))
    log.warning("counted run seed %d (COUNTED_RUN_SEED=%d replays its draws)", seed, seed)
    print(f"counted run seed {seed}")
    q = queue_client
    queue = f"c_{uuid.uuid4().hex[:8]}"
    q.create_queue(
        queue,
        visibility_timeout=VT,
        bucket_size=BUCKET,
        max_delivery_count=1000,
        repair_timeout=REPAIR_TIMEOUT,
    )
    logs = [tmp_path / f"client-{i}.log" for i in range(PROCESSES)]
    done = str(tmp_path / "produced")
    share = messages // PROCESSES
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=run,
            args=(cassieq_options, queue, who, str(logs[who]), VT),
            kwargs={
                "messages": share + (messages - share * PROCESSES if who == 0 else 0),
                "seed": seed + 1000 * who,
                "rate": RATE,
                "done_path": done,
                "idle_seconds": IDLE,
            },
        )
        for who in range(PROCESSES)
    ]
    started = time.monotonic()
    for p in procs:
        p.start()
    try:
        while any(p.is_alive() for p in procs):
            q.repair(queue)  # what a service's repair loop does
            time.sleep(1.0)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    took = time.monotonic() - started
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    # What the clients left: delivered by a last consumer without faults, after repair.
    final = tmp_path / "final.log"
    out = Log(str(final))
    last = time.monotonic()
    while time.monotonic() - last < FINAL_IDLE:
        q.repair(queue)
        for m in q.get_many(queue, max_messages=100, visibility_timeout=30):
            last = time.monotonic()
            out("D", m.payload.decode(), m.id, m.delivery_count, "final", time.time())
            out("A", m.payload.decode(), m.id, q.ack(queue, m.pop_receipt), "final")
        time.sleep(0.2)
    out.close()
    for _ in range(3):
        report = q.repair(queue)
    stats = q.stats(queue)

    returned: set[str] = set()
    unreturned: set[str] = set()
    ids_of: dict[str, set[int]] = collections.defaultdict(set)
    # payload -> its deliveries in the order they reached a consumer, each with its outcome
    # (the ack or release the same consumer made of it, whenever that was logged).
    deliveries: dict[str, list[dict]] = collections.defaultdict(list)
    latest: dict[tuple[str, str], dict] = {}
    held = lost_gets = 0
    for e in _entries([*logs, final]):
        kind = e[0]
        if kind == "P":
            returned.update(e[1])
        elif kind == "PX":
            unreturned.update(e[1])
        elif kind == "D":
            ids_of[e[1]].add(e[2])
            d = {"by": e[4], "count": e[3], "from": e[5], "at": e[-1], "outcome": None}
            d["ended"] = None
            deliveries[e[1]].append(d)
            latest[(e[1], e[4])] = d
        elif kind in ("A", "R"):
            d = latest[(e[1], e[4])]
            d["outcome"] = f"{'ack' if kind == 'A' else 'release'} {e[3]}".lower()
            d["ended"] = e[-1]
        elif kind == "T":
            held += 1
        elif kind == "X":
            lost_gets += 1

    never_delivered = sorted(returned - set(ids_of))
    never_acked = sorted(
        p
        for p in returned
        if not any(d["outcome"] in ("ack true", "ack raised") for d in deliveries[p])
    )
    enqueued_twice = sorted(p for p, ids in ids_of.items() if len(ids) > 1)
    # Every delivery after a message's first, by what ended the delivery before it. An ack
    # that returned True before the next delivery reached its consumer would be a message
    # delivered after it was acked; one that returned after is the documented race of a plain
    # ack (its version check, then the other consumer's claim, then its write).
    again: collections.Counter = collections.Counter()
    examples: dict[str, list] = {}
    for payload, ds in deliveries.items():
        for before in ds[:-1]:
            why = before["outcome"] or "no outcome"
            # An ack that returned after its delivery's visibility had ended: another consumer
            # may have claimed the redelivery meanwhile, between the plain ack's version check
            # and its write or before it (at least once after a visibility timeout, and a
            # plain ack's race: documented; both acks may then return True).
            late_ack = before["ended"] is not None and before["ended"] > before["from"] + VT
            if why == "ack true" and late_ack:
                why = "ack true after its visibility ended"
            again[why] += 1
            examples.setdefault(why, [payload, ds])
    summary = {
        "seed": seed,
        "seconds": round(took, 1),
        "puts returned": len(returned),
        "puts raised": len(unreturned - returned),
        "delivered again after": dict(again),
        "timer writes held": held,
        "receives that raised": lost_gets,
        "stats": {k: stats[k] for k in ("backlog", "in_flight", "delayed", "dropped")},
        "reader pointer": stats["reader_pointer"],
        "repair pointer": stats["repair_pointer"],
        "repair report pointer": report.repair_pointer,
        "an example of each": examples,
    }
    print(json.dumps(summary))
    if record is not None:
        kept = {k: v for k, v in summary.items() if k != "an example of each"}
        with record.open("a") as out:
            out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {json.dumps(kept)}\n")
    log.warning("counted run: %s", json.dumps(summary))
    assert not never_delivered, f"returned puts never delivered: {never_delivered[:20]}"
    assert not never_acked, f"returned puts never acked: {never_acked[:20]}"
    assert not enqueued_twice, f"enqueued twice: {enqueued_twice[:20]}"
    # Nothing is delivered again after an ack that returned True within its visibility.
    assert again["ack true"] == 0, summary
    assert stats["backlog"] == 0 and stats["in_flight"] == 0 and stats["delayed"] == 0, stats
    assert stats["dropped"] == 0 and stats["dead_lettered"] == 0, stats
    assert stats["repair_pointer"] == stats["reader_pointer"] // BUCKET, stats
    assert held > 0 and len(returned) > 0.8 * messages, summary
    return summary
