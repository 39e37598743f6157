"""Redrive in batches: a mover process SIGKILLed in the middle of a batch, and a rerun, land
every dead letter in the destination once and drain the source; the rate limit holds a move
to its pace; progress is reported as the counts grow."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine.core.progress import ProgressEvent
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.upkeep.moves import HEADER_REDRIVE_COUNT

pytestmark = [pytest.mark.integration, pytest.mark.fast]

VT = 3.0

# The mover: redrives in batches of 200; at the third batch it stops at the named step (after
# the batch's write and before its ack, or after its plan and before its write) and says so,
# then waits there to be killed.
MOVER = """
import json, sys, time
from cassieq_spark import QueueClient
from cassieq_spark.engine.store import faults

options, dlq, dest, step, VT = json.loads(sys.argv[1])
seen = []

def stop_here(**_):
    seen.append(1)
    if len(seen) == 3:
        print("at " + step, flush=True)
        time.sleep(600)

faults.on(step, stop_here)
with QueueClient.from_options(options) as client:
    client.redrive(dlq, to=dest, batch_size=200, visibility_timeout=VT)
print("finished", flush=True)
"""


def _dead_letter_queue(client: QueueClient, queue: str, n: int) -> str:
    """A dead-letter queue of ``queue`` holding ``n`` messages ``0..n-1``."""
    dlq = f"{queue}_dlq"
    client.create_queue(dlq)
    client.create_queue(queue, dead_letter_queue=dlq)
    for start in range(0, n, 1000):
        client.put_many(dlq, [str(i) for i in range(start, min(n, start + 1000))])
    return dlq


def _take_all(client: QueueClient, queue: str) -> list:
    """Every visible message of ``queue``, received in batches and acked."""
    out = []
    while batch := client.get_many(queue, 1000, visibility_timeout=600):
        out.extend(batch)
        assert all(r.ok for r in client.ack_many(queue, [m.pop_receipt for m in batch]))
    return out


@pytest.mark.slow  # two mover processes and a visibility timeout: about 10 s each
@pytest.mark.parametrize("step", ["move.written", "move.planned"])
def test_a_redrive_killed_midway_and_rerun_moves_each_message_once(
    queue_client, queue_name, cassieq_options, step
):
    n = 1000
    dlq = _dead_letter_queue(queue_client, queue_name, n)
    proc = subprocess.Popen(
        [sys.executable, "-c", MOVER, json.dumps([cassieq_options, dlq, queue_name, step, VT])],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip() == f"at {step}", line
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(VT + 0.3)  # the killed mover's claims run out: its batch is visible again
    report = queue_client.redrive(dlq, to=queue_name, batch_size=200)
    assert report.taken_over == 0
    assert report.moved == n - 400  # the two batches acked before the kill stay moved
    counts = collections.Counter(int(m.payload) for m in _take_all(queue_client, queue_name))
    assert sorted(counts) == list(range(n)), f"missing: {sorted(set(range(n)) - set(counts))[:10]}"
    assert [k for k, c in counts.items() if c > 1] == []
    assert queue_client.get(dlq) is None
    assert queue_client.stats(dlq)["backlog"] == 0


def test_a_redrive_cuts_its_batches_to_its_rate_and_reports_progress(queue_client, queue_name):
    dlq = _dead_letter_queue(queue_client, queue_name, 60)
    events: list[ProgressEvent] = []

    class Sink:
        def update(self, event: ProgressEvent) -> None:
            events.append(event)

    report = queue_client.redrive(dlq, to=queue_name, batch_size=50, rate=40, progress=Sink())
    assert report.moved == 60
    # At 40 a second a batch is cut to 40 (the pause between batches: tests/unit).
    assert events[0].total == 60 and not events[0].finished
    assert [e.done for e in events if not e.finished] == [40, 60]
    assert events[-1].finished and events[-1].counts == {"moved": 60, "taken_over": 0}
    got = _take_all(queue_client, queue_name)
    assert sorted(int(m.payload) for m in got) == list(range(60))
    assert {m.headers[HEADER_REDRIVE_COUNT] for m in got} == {"1"}


@pytest.mark.parametrize("first_one_at_a_time", [True, False])
def test_a_move_that_died_is_finished_by_the_other_path_without_a_second_copy(
    queue_client, queue_name, first_one_at_a_time
):
    src, dst = f"{queue_name}_src", queue_name
    queue_client.create_queue(src)
    queue_client.create_queue(dst)
    queue_client.put_many(src, [str(i) for i in range(30)])

    def die(**_context) -> None:
        raise RuntimeError("mover crashed after its write")

    faults.on("move.written", die)
    try:
        with pytest.raises(RuntimeError, match="mover crashed"):
            queue_client.move(
                src, to=dst, visibility_timeout=2.5, one_at_a_time=first_one_at_a_time
            )
    finally:
        faults.reset()
    time.sleep(2.7)
    report = queue_client.move(src, to=dst, one_at_a_time=not first_one_at_a_time)
    assert report.moved == 30
    counts = collections.Counter(int(m.payload) for m in _take_all(queue_client, dst))
    assert sorted(counts) == list(range(30)) and set(counts.values()) == {1}
