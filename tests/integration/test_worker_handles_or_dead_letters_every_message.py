"""The worker (``client.worker``) in real processes against the real Cassandra, counted: every
message is acked or dead-lettered whatever its handler does (crashes, hangs past the visibility
timeout) and when a worker process is killed mid-batch; the heartbeat keeps a hanging message
from being redelivered; SIGTERM releases what is in hand at once."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cassieq_spark.engine.consume.consumer import HEADER_ORIGIN_ID

pytestmark = [pytest.mark.integration]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "worker_proc.py"
VT = 2.0


def _start(options, queue, out: Path, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), json.dumps(options), queue, str(out), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _events(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _drain_dead_letters(client, dlq: str) -> dict[int, str]:
    """Dead letters by their original id, payload text."""
    out: dict[int, str] = {}
    while True:
        got = client.get_many(dlq, 100)
        if not got:
            return out
        for m in got:
            out[int(m.headers[HEADER_ORIGIN_ID])] = m.text
        client.ack_many(dlq, [m.pop_receipt for m in got])


def test_every_message_is_acked_or_dead_lettered_across_crashes_and_a_killed_worker(
    queue_client, queue_name, cassieq_options, tmp_path
):
    """Three worker processes; handlers crash (always, or once), and one process is
    SIGKILLed while it holds a batch: each id ends acked once or in the dead-letter queue."""
    dlq = queue_name + "_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(
        queue_name, visibility_timeout=VT, max_delivery_count=3, dead_letter_queue=dlq
    )
    payloads = [f"slow:{i}" for i in range(24)] + [f"ok:{i}" for i in range(40)]
    payloads += [f"crash:{i}" for i in range(4)] + [f"flaky:{i}" for i in range(4)]
    ids = dict(zip(queue_client.put_many(queue_name, payloads), payloads, strict=True))
    outs = [tmp_path / f"w{i}.ndjson" for i in range(3)]
    victim = _start(cassieq_options, queue_name, outs[0], "--concurrency", "6")
    # The victim holds slow messages: kill it while its handlers run.
    _wait_for(lambda: len(_events(outs[0])) >= 6, 30, "the victim's first handlers")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    in_hand = {e["id"] for e in _events(outs[0]) if e["event"] == "start"} - {
        e["id"] for e in _events(outs[0]) if e["event"] == "ack"
    }
    others = [_start(cassieq_options, queue_name, o, "--concurrency", "4") for o in outs[1:]]
    try:

        def settled() -> bool:
            s = queue_client.stats(queue_name)
            return s["acked"] + s["dead_lettered"] >= len(ids)

        _wait_for(settled, 90, "every message acked or dead-lettered")
    finally:
        for p in others:
            _stop(p)
    events = [e for o in outs for e in _events(o)]
    acks = collections.Counter(e["id"] for e in events if e["event"] == "ack")
    dead = _drain_dead_letters(queue_client, dlq)
    crash = {i for i, p in ids.items() if p.startswith("crash")}
    assert in_hand, "the victim was killed with nothing in hand: the test proved nothing"
    assert set(acks) | set(dead) == set(ids), "a message was neither acked nor dead-lettered"
    assert not set(acks) & set(dead)
    assert max(acks.values()) == 1, f"acked twice: {[i for i, n in acks.items() if n > 1]}"
    assert set(dead) == crash, "only the always-crashing messages are dead letters"
    assert in_hand <= set(acks) | set(dead), "what the killed process held came back"
    flaky = {i for i, p in ids.items() if p.startswith("flaky")}
    assert {e["id"] for e in events if e["event"] == "failure"} >= flaky
    assert {e["id"] for e in events if e["event"] == "dead"} == crash
    s = queue_client.stats(queue_name)
    assert (s["acked"], s["dead_lettered"], s["backlog"], s["in_flight"]) == (
        len(ids) - len(crash),
        len(crash),
        0,
        0,
    )


@pytest.mark.parametrize("heartbeat", [True, False], ids=["heartbeat", "no-heartbeat"])
def test_a_handler_past_the_visibility_timeout_keeps_its_message_only_with_the_heartbeat(
    queue_client, queue_name, cassieq_options, tmp_path, heartbeat
):
    """A first delivery's handler sleeps 3 s under a 2 s visibility timeout: with the
    heartbeat each message is delivered once and acked by that handler; without it, it is
    delivered again meanwhile (to another thread, which acks it) and the first holder's late
    ack is stale."""
    queue_client.create_queue(queue_name, visibility_timeout=VT, max_delivery_count=5)
    ids = queue_client.put_many(queue_name, ["hang:0", "hang:1"])
    out = tmp_path / "w.ndjson"
    extra = [] if heartbeat else ["--no-heartbeat"]
    proc = _start(cassieq_options, queue_name, out, "--concurrency", "4", "--hang", "3", *extra)
    try:
        _wait_for(
            lambda: len({e["id"] for e in _events(out) if e["event"] == "ack"}) == 2,
            30,
            "both messages acked",
        )
        time.sleep(1.0)  # a redelivery, if any, would start within this
    finally:
        _stop(proc)
    events = _events(out)
    starts = collections.Counter(e["id"] for e in events if e["event"] == "start")
    acks = collections.Counter(e["id"] for e in events if e["event"] == "ack")
    stale = collections.Counter(e["id"] for e in events if e["event"] == "stale")
    assert set(acks) == set(ids)
    if heartbeat:
        assert starts == {i: 1 for i in ids}, starts
        assert not stale
    else:
        assert starts == {i: 2 for i in ids}, starts
        assert stale == {i: 1 for i in ids}, stale  # the first holders, finished at shutdown
    assert queue_client.stats(queue_name)["in_flight"] == 0


def test_sigterm_releases_the_messages_in_hand_long_before_their_visibility_timeout(
    queue_client, queue_name, cassieq_options, tmp_path, record_property
):
    """Handlers hang for a minute under a 20 s visibility timeout (heartbeat on); SIGTERM with
    0.5 s of grace: the process exits and both messages are visible again within seconds."""
    vt = 20.0
    queue_client.create_queue(queue_name, visibility_timeout=vt)
    ids = queue_client.put_many(queue_name, ["hang:0", "hang:1"])
    out = tmp_path / "w.ndjson"
    proc = _start(
        cassieq_options, queue_name, out, "--concurrency", "2", "--hang", "60", "--grace", "0.5"
    )
    try:
        _wait_for(lambda: len(_events(out)) >= 2, 30, "both handlers started")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        exited = time.monotonic() - t0
        got = []
        while len(got) < 2 and time.monotonic() - t0 < vt:
            got += queue_client.get_many(queue_name, 2, wait_seconds=1.0)
        back = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    record_property("exited_after_sigterm_s", round(exited, 2))
    record_property("redelivered_after_sigterm_s", round(back, 2))
    assert sorted(m.id for m in got) == sorted(ids)
    assert back < vt / 4, f"redelivered {back:.1f} s after SIGTERM (timeout {vt} s)"
    assert exited < 5, exited
    assert proc.returncode == 0
    assert {e["id"] for e in _events(out) if e["event"] == "release"} == set(ids)
    assert os.path.exists(out)
