"""The soak's client traffic, each function run in a process of its own: a producer that puts at
a steady rate, and a get/ack consumer. Both write one JSON line per message to their own file
(so nothing is held in memory and a crash loses at most a line) and stop at a stop file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _now_ms() -> int:
    return int(time.time() * 1000)


def produce(
    options: dict[str, str], queue: str, tag: str, rate: float, stop: str, out: str
) -> None:
    """put and put_many(5) in turn at about ``rate`` messages per second; payload
    ``tag-seq-sent_ms``. A line per sent message, ``{"p": payload}``, or ``{"error": ...}``."""
    from cassieq_spark import QueueClient

    with QueueClient.from_options(options) as client, open(out, "a") as f:
        seq = 0
        started = time.monotonic()
        sent = 0
        while not os.path.exists(stop):
            n = 5 if seq % 2 else 1
            batch = [f"{tag}-{seq + k}-{_now_ms()}" for k in range(n)]
            try:
                if n == 1:
                    client.put(queue, batch[0].encode())
                else:
                    client.put_many(queue, [b.encode() for b in batch])
                for p in batch:
                    f.write(json.dumps({"p": p}) + "\n")
                sent += n
            except Exception as exc:  # counted in the report; the soak goes on
                f.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
            seq += n
            f.flush()
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


def consume(options: dict[str, str], queue: str, stop: str, out: str, batch: int = 1) -> None:
    """get/ack (``batch`` 1) or get_many(batch)/ack_many until the stop file exists and the
    queue has been empty for 10 s. A line per acked delivery: payload, id, received ms,
    delivery count."""
    from cassieq_spark import QueueClient

    with QueueClient.from_options(options) as client, open(out, "a") as f:
        idle_since = None
        while True:
            try:
                if batch == 1:
                    one = client.get(queue, visibility_timeout=60)
                    msgs = [one] if one is not None else []
                else:
                    msgs = client.get_many(queue, batch, visibility_timeout=60, wait_seconds=1)
                if not msgs:
                    idle_since = idle_since or time.monotonic()
                    if os.path.exists(stop) and time.monotonic() - idle_since > 10:
                        return
                    time.sleep(0.05)
                    continue
                idle_since = None
                got = _now_ms()
                held = [(m, m.pop_receipt) for m in msgs if m.pop_receipt]
                if batch == 1:
                    acked = [client.ack(queue, r) for _, r in held]
                else:
                    acked = [res.ok for res in client.ack_many(queue, [r for _, r in held])]
                for (msg, _), ok in zip(held, acked, strict=True):
                    if ok:
                        rec = {"p": msg.text, "id": msg.id, "t": got, "n": msg.delivery_count}
                        f.write(json.dumps(rec) + "\n")
                f.flush()
            except Exception as exc:
                f.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
                f.flush()


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by a kill
            continue
    return out
