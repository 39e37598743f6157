"""What message groups cost: get_many + ack_many throughput of one consumer (or several, each
in its own process) on a queue of grouped messages (1, 10 and 1,000 groups) against the same
on ungrouped messages, in the same run, interleaved (unordered, 1, 10, 1,000, unordered, ...);
and a group carrying half the traffic: the other groups' throughput with it against without it.

Each scenario fills a fresh queue (100-byte messages, the groups interleaved at random), then
each consumer loops ``get_many(100)`` + ``ack_many`` until the queue is drained or the time
budget ends; the rate is messages acked per second (all consumers together). Several
consumers race for the same first rows: each lost race drops the loser's stretch memory, which
is what the hot-group scenario measures with them. Statements and lightweight transactions
per message are counted as in ``bench/engine.py`` (client side, by CQL text, summed over the
consumers).

The other groups' throughput is their messages over the time until the last of them was acked.
With the hot group the run goes on after that, delivering the hot group alone (one message per
receive-and-ack round trip, as any group) until it drains or the budget ends; their messages
over that whole run are reported too, but they measure the budget, not the other groups.

    .venv/bin/python -m bench.groups [--messages 4000] [--repeats 2] [--seconds 20]
        [--consumers 1]

Writes bench/results/groups-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import random
import statistics
import time
import uuid
from pathlib import Path

from cassieq_spark import QueueClient
from cassieq_spark.engine.core.messages import HEADER_GROUP
from cassieq_spark.engine.write.producer import enqueue

from .engine import KEYSPACE, CountingSession

HOT = "hot"


def _fill(client: QueueClient, queue: str, names: list[str | None]) -> None:
    info = client.get_queue(queue)
    for at in range(0, len(names), 1000):
        part = names[at : at + 1000]
        headers = [{HEADER_GROUP: g} if g is not None else None for g in part]
        enqueue(client.conn, client.counters, info, [b"x" * 100] * len(part), headers)


def _names(messages: int, groups: int, hot_share: float, seed: int) -> list[str | None]:
    rng = random.Random(seed)
    hot = round(messages * hot_share)
    rest = messages - hot
    names: list[str | None] = [None] * rest
    if groups:
        names = [f"g{rng.randrange(groups)}" for _ in range(rest)]
    names += [HOT] * hot
    rng.shuffle(names)
    return names


def _consume(
    client: QueueClient,
    counter: CountingSession,
    queue: str,
    total: int,
    seconds: float,
    finished=None,
):
    """Drain ``queue`` with get_many(100) + ack_many for at most ``seconds``; per-group counts.
    ``finished`` (a shared counter of acks, several consumers): stop once it reaches ``total``."""
    s0, l0 = counter.snapshot()
    done = 0
    other = 0
    other_at = None
    empty = 0
    t0 = time.perf_counter()

    def left() -> bool:
        acked = finished.value if finished is not None else done
        return acked < total and time.perf_counter() - t0 < seconds

    while left():
        got = client.get_many(queue, max_messages=100, visibility_timeout=60)
        if not got:
            empty += 1
            if empty > 20:
                break
            continue
        empty = 0
        results = client.ack_many(queue, [str(m.pop_receipt) for m in got])
        acked = sum(1 for r in results if r.ok)
        done += acked
        if finished is not None:
            with finished.get_lock():
                finished.value += acked
        others_now = sum(1 for m, r in zip(got, results, strict=True) if r.ok and m.group != HOT)
        if others_now:
            other += others_now
            other_at = time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    s1, l1 = counter.snapshot()
    return {
        "acked": done,
        "seconds": round(elapsed, 3),
        "per_second": round(done / elapsed, 1) if elapsed else None,
        "others_acked": other,
        "others_per_second": round(other / elapsed, 1) if elapsed else None,
        "others_last_at": round(other_at, 3) if other_at else None,
        # the other groups' own rate: their messages over the time until the last of them was
        # acked (with a hot group the run goes on after them, delivering the hot group alone)
        "others_own_per_second": round(other / other_at, 1) if other_at else None,
        "statements_per_message": round((s1 - s0) / max(1, done), 3),
        "lwt_per_message": round((l1 - l0) / max(1, done), 3),
        "statements": s1 - s0,
        "lwt": l1 - l0,
    }


def _consumer_process(
    contact_points, port, keyspace, queue, total, seconds, start_at, finished, out
):
    """One consumer in its own process: connects, waits for the common start, drains."""
    client = QueueClient.connect(contact_points, port, keyspace=keyspace)
    counter = CountingSession(client.conn.session)
    client.conn.session = counter
    try:
        client.get_queue(queue)  # the queue's definition read before the clock starts
        time.sleep(max(0.0, start_at - time.time()))
        out.put(_consume(client, counter, queue, total, seconds, finished))
    finally:
        client.close()


def _consume_many(client: QueueClient, queue: str, total: int, seconds: float, consumers: int):
    """``consumers`` processes drain ``queue`` together from a common start; their counts
    summed (seconds, and when the other groups were done, the latest of them)."""
    ctx = mp.get_context("spawn")
    finished = ctx.Value("q", 0)
    out = ctx.Queue()
    cfg = client.conn.config
    start_at = time.time() + 8.0  # every process connected by then (spawn imports the package)
    procs = [
        ctx.Process(
            target=_consumer_process,
            args=(
                cfg.contact_points,
                cfg.port,
                cfg.keyspace,
                queue,
                total,
                seconds,
                start_at,
                finished,
                out,
            ),
        )
        for _ in range(consumers)
    ]
    for p in procs:
        p.start()
    runs = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    done = sum(r["acked"] for r in runs)
    other = sum(r["others_acked"] for r in runs)
    elapsed = max(r["seconds"] for r in runs)
    lasts = [r["others_last_at"] for r in runs if r["others_last_at"]]
    other_at = max(lasts) if lasts else None
    statements = sum(r["statements"] for r in runs)
    lwt = sum(r["lwt"] for r in runs)
    return {
        "acked": done,
        "seconds": elapsed,
        "per_second": round(done / elapsed, 1) if elapsed else None,
        "others_acked": other,
        "others_per_second": round(other / elapsed, 1) if elapsed else None,
        "others_last_at": other_at,
        "others_own_per_second": round(other / other_at, 1) if other_at else None,
        "statements_per_message": round(statements / max(1, done), 3),
        "lwt_per_message": round(lwt / max(1, done), 3),
        "statements": statements,
        "lwt": lwt,
        "consumers": [{k: r[k] for k in ("acked", "seconds", "others_acked")} for r in runs],
    }


SCENARIOS = [
    # (name, groups, hot share)
    ("unordered", 0, 0.0),
    ("1 group", 1, 0.0),
    ("10 groups", 10, 0.0),
    ("1,000 groups", 1000, 0.0),
    ("1,000 groups, without the hot group", 1000, 0.0),
    ("1,000 groups + a hot group with half the traffic", 1000, 0.5),
]


def run(
    client: QueueClient,
    counter: CountingSession,
    messages: int,
    repeats: int,
    seconds: float,
    consumers: int = 1,
):
    raw: dict[str, list[dict]] = {name: [] for name, _, _ in SCENARIOS}
    for rep in range(repeats):
        for name, groups, hot in SCENARIOS:
            queue = f"bgroups_{uuid.uuid4().hex[:10]}"
            client.create_queue(queue, visibility_timeout=60)
            # the hot scenario's other groups carry as many messages as without it
            n = messages * 2 if hot else messages
            names = _names(n, groups, hot, seed=rep)
            _fill(client, queue, names)
            if consumers > 1:
                r = _consume_many(client, queue, len(names), seconds, consumers)
            else:
                r = _consume(client, counter, queue, len(names), seconds)
            r["messages"] = len(names)
            raw[name].append(r)
            client.delete_queue(queue)
    out: dict[str, dict] = {}
    for name, runs in raw.items():
        out[name] = {
            "per_second_median": statistics.median(r["per_second"] or 0 for r in runs),
            "others_per_second_median": statistics.median(
                r["others_per_second"] or 0 for r in runs
            ),
            "others_own_per_second_median": statistics.median(
                r["others_own_per_second"] or 0 for r in runs
            ),
            "runs": runs,
        }
    base: float = out["unordered"]["per_second_median"]
    for name in out:
        out[name]["vs_unordered"] = (
            round(out[name]["per_second_median"] / base, 3) if base else None
        )
    without: float = out["1,000 groups, without the hot group"]["others_per_second_median"]
    with_hot: float = out["1,000 groups + a hot group with half the traffic"][
        "others_per_second_median"
    ]
    own_without: float = out["1,000 groups, without the hot group"]["others_own_per_second_median"]
    own_with_hot: float = out["1,000 groups + a hot group with half the traffic"][
        "others_own_per_second_median"
    ]
    ratios = {
        "ordered_1000_vs_unordered": out["1,000 groups"]["vs_unordered"],
        # the goal's figure: the other groups' messages over the time they took
        "others_with_hot_vs_without": round(own_with_hot / own_without, 3) if own_without else None,
        # the same over the whole run (with the hot group: until the budget or the hot group's end)
        "others_over_whole_run_with_hot_vs_without": round(with_hot / without, 3)
        if without
        else None,
    }
    return out, ratios


def suite(cfg) -> dict:
    """The suite ``groups`` of ``bench.run`` (a BenchConfig): quick 2,000 messages, full 10,000."""
    client = QueueClient.connect(cfg.contact_points, cfg.port, keyspace=f"{cfg.keyspace}_groups")
    client.bootstrap(create_keyspace=True)
    counter = CountingSession(client.conn.session)
    client.conn.session = counter
    try:
        messages = 2000 if cfg.quick else 10_000
        scenarios, ratios = run(client, counter, messages, cfg.repeats, 20.0 if cfg.quick else 60.0)
    finally:
        client.close()
    return {"messages": messages, "scenarios": scenarios, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0, help="time budget per scenario")
    ap.add_argument(
        "--consumers", type=int, default=1, help="consumer processes draining each queue together"
    )
    ap.add_argument("--contact-points", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9042)
    # a keyspace of its own: its schema version is this branch's, not the shared bench one's
    ap.add_argument("--keyspace", default=f"{KEYSPACE}_groups")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    client = QueueClient.connect(args.contact_points, args.port, keyspace=args.keyspace)
    client.bootstrap(create_keyspace=True)
    counter = CountingSession(client.conn.session)
    client.conn.session = counter
    try:
        scenarios, ratios = run(
            client, counter, args.messages, args.repeats, args.seconds, args.consumers
        )
    finally:
        client.close()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d_%H%M%S")
    result = {
        "date": stamp,
        "messages": args.messages,
        "repeats": args.repeats,
        "seconds_budget": args.seconds,
        "consumers": args.consumers,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "scenarios": scenarios,
        "ratios": ratios,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"groups-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# Message groups, get_many(100) + ack_many, {args.consumers} consumer(s) ({stamp})",
        "",
        f"{args.messages} messages per scenario (twice that with the hot group), {args.repeats} "
        f"repeats interleaved, at most {args.seconds:g} s each; load average "
        f"{result['load_average_start'][0]} -> {result['load_average_end'][0]}.",
        "",
        "| scenario | msg/s (median) | vs unordered | other groups' msg/s | other groups' msg/s "
        "over the whole run | other groups done at (s) | stmts/msg | LWT/msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in scenarios.items():
        last = s["runs"][-1]
        lines.append(
            f"| {name} | {s['per_second_median']:.1f} | {s['vs_unordered']} | "
            f"{s['others_own_per_second_median']:.1f} | {s['others_per_second_median']:.1f} | "
            f"{last['others_last_at']} | {last['statements_per_message']} | "
            f"{last['lwt_per_message']} |"
        )
    lines += [
        "",
        f"- 1,000 groups / unordered: **{ratios['ordered_1000_vs_unordered']}** (goal >= 0.5)",
        f"- other groups with a hot group / without: **{ratios['others_with_hot_vs_without']}** "
        "(goal >= 0.8; their messages over the time until the last of them was acked)",
        "- the same over the whole run (with the hot group the run goes on, the hot group "
        f"alone, until it drains or the budget ends): {ratios['others_over_whole_run_with_hot_vs_without']}",
        "",
    ]
    (out_dir / f"groups-{stamp}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
