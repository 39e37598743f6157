"""Consumer *processes* on a queue of message groups, each logging every delivery and ack with
timestamps to a file of its own (flushed per line, so a consumer killed with SIGKILL leaves its
log up to the kill), and the count that proves the groups' invariants from those logs:

- every message is acked exactly once, and no (id, receipt version) is handed out twice;
- for every group, the deliveries in time order carry non-decreasing ids, each id in one
  unbroken run (a redelivery of the head comes before the next message, never after it), and
  the run of ids is the group's ids in id order;
- no two deliveries of one group overlap. A delivery's window is an inner bound of the time
  its consumer held the message: from just after ``get``/``get_many`` returned (the claim was
  made before) to the earlier of just before ``ack`` was called and (just before the get was
  called + the visibility timeout). A window of a group that starts before the previous
  window of that group ended is a second message of the group in flight.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from cassieq_spark import QueueClient
from cassieq_spark.engine.core.messages import HEADER_GROUP
from cassieq_spark.engine.core.receipts import PopReceipt
from cassieq_spark.engine.write.producer import enqueue


def fill(client: QueueClient, queue: str, groups: int, per_group: int, seed: int) -> dict:
    """``groups * per_group`` messages, the groups interleaved at random, in put_many calls of
    up to 500 (their ids in list order); plus a few ungrouped ones. Returns id -> group (None
    for ungrouped)."""
    rng = random.Random(seed)
    names = [f"g{i:04d}" for i in range(groups) for _ in range(per_group)]
    rng.shuffle(names)
    names += [None] * max(1, len(names) // 50)
    rng.shuffle(names)
    info = client.get_queue(queue)
    out: dict = {}
    for at in range(0, len(names), 500):
        part = names[at : at + 500]
        headers = [{HEADER_GROUP: g} if g is not None else None for g in part]
        payloads = [f"{at + i}".encode() for i in range(len(part))]
        ids = enqueue(client.conn, client.counters, info, payloads, headers)
        out.update(zip(ids, part, strict=True))
    return out


def consume(
    options: dict,
    queue: str,
    who: int,
    log_path: str,
    vt: float,
    lost_replies: bool = False,
    seed: int = 0,
    idle_seconds: float = 6.0,
    deadline: float = 300.0,
    until: str | None = None,
) -> None:
    """Receive until nothing came for ``idle_seconds`` (longer than the visibility timeout, so
    expired deliveries come back first); alternate ``get_many`` and ``get``; leave every 17th
    first delivery unacked (it expires and comes back); work on a message 5 to 25 ms.
    With ``lost_replies`` every compare-and-set of this process applies and loses its reply.
    With ``until`` (a path), idleness ends the run only once that file exists (the producers
    are done)."""
    if lost_replies:
        from cassieq_spark.engine.store import faults

        os.environ[faults.ENV] = "lost-reply"
        faults.reset()
    rng = random.Random(seed * 1000 + who)
    end = time.monotonic() + deadline
    last = time.monotonic()
    with open(log_path, "a", buffering=1) as out, QueueClient.from_options(options) as client:
        turn = 0
        while time.monotonic() < end and (
            time.monotonic() - last < idle_seconds
            or (until is not None and not Path(until).exists())
        ):
            turn += 1
            t0 = time.time()
            if turn % 3 == 0:
                one = client.get(queue, visibility_timeout=vt)
                got = [one] if one is not None else []
            else:
                got = client.get_many(
                    queue, max_messages=rng.choice((5, 20, 50)), visibility_timeout=vt
                )
            t1 = time.time()
            if not got:
                time.sleep(0.05)
                continue
            last = time.monotonic()
            for m in got:
                version = PopReceipt.decode(m.pop_receipt).version
                out.write(json.dumps(["D", m.id, m.group, version, t0, t1, who]) + "\n")
            for m in got:
                time.sleep(rng.uniform(0.005, 0.025))
                version = PopReceipt.decode(m.pop_receipt).version
                if m.delivery_count == 1 and m.id % 17 == 0:
                    continue  # never acked: expires, comes back (maybe to another consumer)
                a0 = time.time()
                out.write(json.dumps(["a", m.id, version, a0, who]) + "\n")
                ok = client.ack(queue, m.pop_receipt)
                out.write(json.dumps(["A", m.id, version, a0, time.time(), ok, who]) + "\n")


@dataclass
class Counted:
    deliveries: int
    redeliveries: int
    acks: int
    groups: int
    per_consumer: dict


def read_logs(paths: list[Path]) -> tuple[list, dict]:
    """Deliveries ``(id, group, version, t0, t1, who)`` and acks ``(id, version) -> (a0, ok)``
    from the consumers' logs (a line cut by a SIGKILL is left out). An ack a SIGKILL cut short
    (started, no outcome logged) has ``ok`` None: it may have applied."""
    deliveries, acks = [], {}
    for p in paths:
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a killed consumer
            if rec[0] == "D":
                deliveries.append(tuple(rec[1:]))
            elif rec[0] == "a":
                acks.setdefault((rec[1], rec[2]), (rec[3], None))
            else:
                _, mid, version, a0, _a1, ok, _who = rec
                acks[(mid, version)] = (a0, ok)
    return deliveries, acks


def check(groups_of: dict, deliveries: list, acks: dict, vt: float) -> Counted:
    """Assert the invariants of the module docstring; the counts."""
    handed = collections.Counter((d[0], d[2]) for d in deliveries)
    twice = [k for k, n in handed.items() if n > 1]
    assert not twice, f"(id, version) handed out twice: {twice[:5]}"
    acked = collections.Counter(mid for (mid, _v), (_a0, ok) in acks.items() if ok)
    maybe = {mid for (mid, _v), (_a0, ok) in acks.items() if ok is None}
    never = sorted(set(groups_of) - set(acked) - maybe)
    assert not never, (
        f"never acked: {never[:10]} ({len(never)}); their deliveries (id, version, who): "
        f"{[(d[0], d[2], d[5]) for d in deliveries if d[0] in set(never[:10])]}; "
        f"their acks: {[(k, v[1]) for k, v in acks.items() if k[0] in set(never[:10])]}; "
        f"last delivery logged at {max((d[4] for d in deliveries), default=None)}"
    )
    assert set(acked) <= set(groups_of), f"unknown: {sorted(set(acked) - set(groups_of))[:10]}"
    assert max(acked.values()) == 1, f"acked twice: {[m for m, n in acked.items() if n > 1][:5]}"
    by_group = collections.defaultdict(list)
    for mid, group, version, t0, t1, who in deliveries:
        assert group == groups_of[mid], (mid, group, groups_of[mid])
        if group is None:
            continue
        ack = acks.get((mid, version))
        # an ack that applied, or may have (cut short by a SIGKILL), ends the window
        ends = [t0 + vt] + ([ack[0]] if ack is not None and ack[1] is not False else [])
        by_group[group].append((t1, min(ends), mid, version, who))
    expected = collections.defaultdict(list)
    for mid, group in sorted(groups_of.items()):
        if group is not None:
            expected[group].append(mid)
    assert set(by_group) == set(expected)
    for group, windows in by_group.items():
        windows.sort(key=lambda w: (w[0], w[3]))
        runs = [
            mid
            for i, (_s, _e, mid, _v, _w) in enumerate(windows)
            if i == 0 or windows[i - 1][2] != mid
        ]
        assert runs == expected[group], (
            f"group {group}: delivered in the order {runs}, ids {expected[group]}"
        )
        for a, b in zip(windows, windows[1:], strict=False):
            assert b[0] >= a[1], f"group {group}: {b} delivered while {a} was held"
    return Counted(
        deliveries=len(deliveries),
        redeliveries=sum(1 for d in deliveries if d[2] > 1),
        acks=sum(acked.values()),
        groups=len(by_group),
        per_consumer=dict(collections.Counter(d[5] for d in deliveries)),
    )


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def held(log_path: Path) -> tuple[set[tuple[int, int]], set[tuple[int, int]], int]:
    """From one consumer's log: the deliveries ``(id, version)`` it holds with no ack started
    (of each id its latest: a later delivery means the earlier one expired), those whose ack
    is started with no outcome logged (it may have applied), and how many deliveries it
    logged."""
    text = log_path.read_text() if log_path.exists() else ""
    delivered, started, ended = set(), set(), set()
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written
        if rec[0] == "D":
            delivered.add((rec[1], rec[3]))
        elif rec[0] == "a":
            started.add((rec[1], rec[2]))
        else:
            ended.add((rec[1], rec[2]))
    latest = {}
    for mid, version in delivered:
        latest[mid] = max(version, latest.get(mid, version))
    holding = {(mid, v) for mid, v in latest.items() if (mid, v) not in started}
    return holding, started - ended, len(delivered)


def kill_while_holding(
    pid: int, log_path: Path, min_deliveries: int, timeout: float
) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """SIGKILL the consumer ``pid`` at a moment its log shows it has logged ``min_deliveries``
    deliveries and holds a delivered message it means to ack and has not started to (an id
    that is not a multiple of 17: those may be left to expire on purpose). The consumer is
    stopped (SIGSTOP) while its log is read, so what the log shows is what it holds when it is
    killed; if it holds nothing to ack, it is let go on (SIGCONT) and looked at again.
    Returns what it held with no ack started, and its acks cut short by the kill. Fails if
    it holds no such message within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    looks = 0
    while time.monotonic() < deadline:
        if held(log_path)[2] >= min_deliveries:
            os.kill(pid, signal.SIGSTOP)
            looks += 1
            holding, cut, _n = held(log_path)
            if any(mid % 17 for mid, _v in holding):
                os.kill(pid, signal.SIGKILL)
                return holding, cut
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(
        f"consumer {pid} never held a delivered, unacked message in {timeout} s "
        f"({looks} looks at {log_path} after {min_deliveries} deliveries)"
    )


def ack_and_die_before_counting(options: dict, queue: str, receipt: str) -> None:
    """Ack ``receipt`` (a grouped message's) and SIGKILL this process the moment the ack's
    compare-and-set has applied, before its ``acked`` count is sent: a consumer that dies
    inside ``ack``."""
    from cassieq_spark.engine.store import faults

    faults.on("consumer.grouped_ack_applied", lambda **_: os.kill(os.getpid(), signal.SIGKILL))
    with QueueClient.from_options(options) as client:
        client.ack(queue, receipt)


def produce(
    options: dict,
    queue: str,
    who: int,
    log_path: str,
    groups: int,
    calls: int,
    stall_every: int = 0,
    stall_seconds: float = 0.0,
    seed: int = 0,
) -> None:
    """``calls`` puts (``put`` and ``put_many`` of 2 to 4, alternating) of grouped messages,
    each call's group at random among ``groups``; every ``stall_every``-th call stalls
    ``stall_seconds`` with its rows written and its block not closed (``producer.written``),
    long enough for readers to hand the block to repair. Logs one line per message,
    ``["P", id returned, group, call, who]``, after its call returned."""
    from cassieq_spark.engine.store import faults

    stall = {"now": False}

    def hold(**_context) -> None:
        if stall["now"]:
            time.sleep(stall_seconds)

    faults.on("producer.written", hold)
    rng = random.Random(seed * 1000 + who)
    with open(log_path, "a", buffering=1) as out, QueueClient.from_options(options) as client:
        for call in range(calls):
            group = f"g{rng.randrange(groups):03d}"
            stall["now"] = bool(stall_every) and call % stall_every == stall_every - 1
            if call % 2:
                payloads = [f"{who}-{call}-{i}".encode() for i in range(rng.randint(2, 4))]
                ids = client.put_many(queue, payloads, group=group)
            else:
                ids = [client.put(queue, f"{who}-{call}".encode(), group=group)]
            for mid in ids:
                out.write(json.dumps(["P", mid, group, call, who]) + "\n")


def read_puts(paths: list[Path]) -> dict:
    """id -> group of every message the producers' logs show returned."""
    out: dict = {}
    for p in paths:
        for line in p.read_text().splitlines():
            _p, mid, group, _call, _who = json.loads(line)
            assert mid not in out, f"id {mid} returned twice"
            out[mid] = group
    return out
