"""A worker process for the worker tests: ``python worker_proc.py OPTIONS_JSON QUEUE OUT ...``.

What the handler does is read from each payload (``kind:n``), so every process treats a
message alike: ``ok`` returns; ``crash`` raises on every delivery; ``flaky`` raises on the first
delivery only; ``hang`` sleeps ``--hang`` seconds (past the visibility timeout) on its first delivery
then returns;
``slow`` sleeps 0.3 s. Every event is one JSON line appended to OUT (``start`` when a handler
starts, ``ack``/``failure``/``dead``/``stale``/``release`` from the metrics hooks), flushed at
once, so a process killed outright leaves what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from cassieq_spark import QueueClient
from cassieq_spark.worker import Backoff, WorkerMetrics


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("options")
    p.add_argument("queue")
    p.add_argument("out")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--hang", type=float, default=3.0)
    p.add_argument("--no-heartbeat", action="store_true")
    p.add_argument("--grace", type=float, default=10.0)
    a = p.parse_args()
    lock = threading.Lock()
    out = open(a.out, "a", buffering=1)  # noqa: SIM115  # kept open for the process's life

    def event(kind: str, m, **extra) -> None:
        line = {"event": kind, "id": m.id, "payload": m.text, "delivery": m.delivery_count}
        line.update(pid=os.getpid(), t=time.time(), **extra)
        with lock:
            out.write(json.dumps(line) + "\n")
            out.flush()

    class Metrics(WorkerMetrics):
        def on_ack(self, message, seconds):
            event("ack", message)

        def on_failure(self, message, error, retry_in):
            event("failure", message, retry_in=retry_in)

        def on_dead_letter(self, message, error):
            event("dead", message)

        def on_stale(self, message):
            event("stale", message)

        def on_release(self, message):
            event("release", message)

    def handler(m) -> None:
        event("start", m)
        kind = m.text.split(":", 1)[0]
        if kind == "crash" or (kind == "flaky" and m.delivery_count == 1):
            raise RuntimeError(f"handler fails on {m.text}")
        if kind == "hang" and m.delivery_count == 1:
            time.sleep(a.hang)
        elif kind == "slow":
            time.sleep(0.3)

    with QueueClient.from_options(json.loads(a.options)) as client:
        print("ready", flush=True)
        report = client.worker(
            a.queue,
            handler,
            concurrency=a.concurrency,
            wait=1.0,
            heartbeat=not a.no_heartbeat,
            backoff=Backoff(first=0.2, cap=1.0),
            metrics=Metrics(),
            shutdown_grace=a.grace,
        )
    print(json.dumps({"acked": report.acked, "released": report.released}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
