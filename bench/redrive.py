"""What batching buys a redrive: 10,000 dead letters moved back by the batch path
(``get_many``, one keyed write per batch, ``ack_many``) against the one-at-a-time path (a claim,
a keyed write and an ack per message), in the same run, each on a dead-letter queue of its own
filled the same way; the batch path first, then the one-at-a-time path, repeated.

Before it reports, each run is counted: every message id is in the destination once and the
dead-letter queue is empty; a run that is not is an error, not a figure. Progress goes to stderr
as JSON lines (the engine's progress reporter, as ``cassieq redrive`` shows it off a terminal).

    .venv/bin/python -m bench.redrive [--messages 10000] [--baseline-messages N] [--repeats 1]

``--baseline-messages``: the one-at-a-time path on fewer messages (its rate is per message, so
the ratio of the rates is the speed-up); default: as many as the batch path. Writes
bench/results/redrive-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import sys
import time
import uuid
from pathlib import Path

from cassieq_spark import QueueClient
from cassieq_spark.observability.progress_view import JsonLinesProgress

from .engine import KEYSPACE

GOAL = 20.0


def _dead_letters(client: QueueClient, n: int) -> tuple[str, str]:
    name = f"r_{uuid.uuid4().hex[:10]}"
    dlq = f"{name}_dlq"
    client.create_queue(dlq)
    client.create_queue(name, dead_letter_queue=dlq)
    for start in range(0, n, 1000):
        client.put_many(dlq, [f"{i:08d}".encode() * 12 for i in range(start, min(n, start + 1000))])
    return name, dlq


def _count(client: QueueClient, queue: str, dlq: str, n: int) -> None:
    """Every id once in ``queue``, nothing left in ``dlq``; raises otherwise."""
    counts: collections.Counter[int] = collections.Counter()
    while batch := client.get_many(queue, 1000, visibility_timeout=600):
        counts.update(int(m.payload[:8]) for m in batch)
        client.ack_many(queue, [m.pop_receipt for m in batch])
    missing = n - len(set(range(n)) & set(counts))
    twice = sum(1 for c in counts.values() if c > 1)
    if missing or twice or len(counts) != n:
        raise AssertionError(f"redrive of {n}: {missing} missing, {twice} twice in {queue}")
    if client.get(dlq) is not None:
        raise AssertionError(f"dead-letter queue {dlq} not drained")


def _one(client: QueueClient, n: int, one_at_a_time: bool, progress) -> dict:
    queue, dlq = _dead_letters(client, n)
    started = time.perf_counter()
    report = client.redrive(dlq, to=queue, progress=progress, one_at_a_time=one_at_a_time)
    seconds = time.perf_counter() - started
    if report.moved != n:
        raise AssertionError(f"redrive reported {report.moved} moved of {n}")
    _count(client, queue, dlq, n)
    for name in (queue, dlq):
        client.delete_queue(name)
    return {
        "path": "one_at_a_time" if one_at_a_time else "batch",
        "messages": n,
        "seconds": round(seconds, 3),
        "per_second": round(n / seconds, 1),
        "counted": True,
    }


def run(client: QueueClient, messages: int, baseline_messages: int, repeats: int, progress) -> dict:
    runs = []
    for _ in range(repeats):
        runs.append(_one(client, messages, False, progress))
        runs.append(_one(client, baseline_messages, True, progress))
    batch = [r["per_second"] for r in runs if r["path"] == "batch"]
    single = [r["per_second"] for r in runs if r["path"] == "one_at_a_time"]
    ratio = round(min(batch) / max(single), 1)
    return {"runs": runs, "speedup_worst_pair": ratio, "goal": GOAL, "met": ratio >= GOAL}


def suite(cfg) -> dict:
    """The suite ``redrive`` of ``bench.run``: quick 2,000 messages, full 10,000."""
    client = QueueClient.connect(cfg.contact_points, cfg.port, keyspace=f"{cfg.keyspace}_redrive")
    client.bootstrap(create_keyspace=True)
    try:
        n = 2000 if cfg.quick else 10_000
        return run(client, n, n, 1, JsonLinesProgress(sys.stderr, interval=5.0))
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--baseline-messages", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--contact-points", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9042)
    ap.add_argument("--keyspace", default=f"{KEYSPACE}_redrive")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    client = QueueClient.connect(args.contact_points, args.port, keyspace=args.keyspace)
    client.bootstrap(create_keyspace=True)
    try:
        result = run(
            client,
            args.messages,
            args.baseline_messages or args.messages,
            args.repeats,
            JsonLinesProgress(sys.stderr, interval=2.0),
        )
    finally:
        client.close()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d_%H%M%S")
    result.update(
        {
            "date": stamp,
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        }
    )
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"redrive-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# redrive {stamp}",
        "",
        "| path | messages | seconds | messages/s | counted |",
        "|---|---|---|---|---|",
        *(
            f"| {r['path']} | {r['messages']} | {r['seconds']} | {r['per_second']} | yes |"
            for r in result["runs"]
        ),
        "",
        f"batch / one at a time (worst pair): {result['speedup_worst_pair']}x "
        f"(goal >= {GOAL:g}x: {'met' if result['met'] else 'NOT met'}); load average "
        f"{result['load_average_start']} -> {result['load_average_end']}",
    ]
    (out_dir / f"redrive-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
