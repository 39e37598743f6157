"""Producer processes for the deduplicated-put tests: each is a fresh interpreter (``spawn``),
so a kill takes the whole process, driver connections included, as a crash would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

# Run as ``python -c`` by :func:`run_producer`: put every dedup id of argv (payload: the id),
# print {dedup id: message id} as JSON; with KILL_AT set, SIGKILL itself at that fault point.
_PRODUCER = """
import json, os, signal, sys
from cassieq_spark import QueueClient
from cassieq_spark.engine.store import faults
options, queue, ids = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
kill_at = os.environ.get("KILL_AT")
if kill_at:
    faults.on(kill_at, lambda **_: os.kill(os.getpid(), signal.SIGKILL))
with QueueClient.from_options(options) as client:
    got = {d: client.put(queue, d, dedup_id=d) for d in ids}
print(json.dumps(got), flush=True)
"""


def run_producer(
    options: dict[str, str], queue: str, dedup_ids: list[str], kill_at: str | None = None
) -> subprocess.Popen:
    """Start a producer process putting ``dedup_ids`` to ``queue`` (payload = the dedup id)."""
    env = {k: v for k, v in os.environ.items() if k != "KILL_AT"}
    if kill_at:
        env["KILL_AT"] = kill_at
    return subprocess.Popen(
        [sys.executable, "-c", _PRODUCER, json.dumps(options), queue, *dedup_ids],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[int, dict[str, int]]:
    """Wait for a producer: its exit status and what it printed ({} when it died)."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0 and proc.returncode != -signal.SIGKILL:
        raise AssertionError(f"producer failed ({proc.returncode}): {err[-2000:]}")
    return proc.returncode, (json.loads(out) if out.strip() else {})
