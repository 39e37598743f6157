"""`cassieq stats QUEUE --watch` against the real Cassandra, as a user runs it (a subprocess)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cassieq_spark.cli import EXIT_NOT_FOUND

CONSOLE_SCRIPT = Path(sys.executable).parent / "cassieq"


@pytest.fixture
def env(cassieq_options, queue_client) -> dict[str, str]:
    return {
        **os.environ,
        "CASSIEQ_CONTACT_POINTS": cassieq_options["contactPoints"],
        "CASSIEQ_PORT": cassieq_options["port"],
        "CASSIEQ_KEYSPACE": cassieq_options["keyspace"],
    }


def _field(line: str, key: str) -> str:
    found = re.search(rf"\b{key}=(\S+)", line)
    assert found, f"no {key}= in {line!r}"
    return found.group(1)


def test_watch_shows_the_counts_while_messages_are_put(env, queue_client, queue_name) -> None:
    queue_client.create_queue(queue_name, visibility_timeout=300)
    queue_client.put_many(queue_name, [b"a", b"b", b"c", b"d", b"e"])
    assert queue_client.get(queue_name) is not None  # one in flight
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            queue_client.put(queue_name, b"more")
            stop.wait(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        done = subprocess.run(
            [str(CONSOLE_SCRIPT), "stats", queue_name, "--watch", "--interval", "0.2"]
            + ["--count", "3"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop.set()
        producer.join(timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    assert "\x1b" not in done.stdout  # not a terminal: plain lines, no escape codes
    assert all(f"queue={queue_name} " in line for line in lines), lines
    enqueued = [int(_field(line, "enqueued")) for line in lines]
    assert enqueued[0] >= 5 and enqueued[0] < enqueued[-1], lines
    assert enqueued == sorted(enqueued), lines
    assert int(_field(lines[0], "in_flight")) == 1
    assert int(_field(lines[0], "backlog")) >= 4
    assert _field(lines[0], "consumer") == "-"
    assert "enqueued=" in lines[0] and f"enqueued={enqueued[0]} (-)" in lines[0]
    later_rates = [float(re.search(r"enqueued=\d+ \((\S+)/s\)", ln).group(1)) for ln in lines[1:]]
    assert sum(later_rates) > 0, lines
    assert int(_field(lines[-1], "next_id")) >= enqueued[-1]


def test_ctrl_c_ends_a_watch_with_status_0_and_no_traceback(env, queue_client, queue_name):
    queue_client.create_queue(queue_name)
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "stats", queue_name, "--watch", "--interval", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the watch is running once it has drawn
        assert f"queue={queue_name} " in first, first
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_watching_a_missing_queue_is_one_line_and_exit_4(env, queue_name) -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "stats", queue_name, "--watch", "--count", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_NOT_FOUND, done.stderr
    assert done.stderr.count("\n") == 1 and "does not exist" in done.stderr


def test_on_a_terminal_the_view_is_a_table_and_ctrl_c_ends_it_with_status_0(
    env, queue_client, queue_name
) -> None:
    import pty

    queue_client.create_queue(queue_name)
    queue_client.put(queue_name, b"x")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "stats", queue_name, "--watch", "--interval", "0.2"],
        env={**env, "COLUMNS": "100", "LINES": "40", "TERM": "xterm"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"reader pointer" not in seen and time.monotonic() < deadline:
            seen += os.read(leader, 65536)
        assert b"backlog (visible)" in seen and b"reader pointer" in seen, seen[-2000:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        with_rest = seen
        try:
            while chunk := os.read(leader, 65536):
                with_rest += chunk
        except OSError:  # EIO once the child has closed the terminal
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert b"\x1b[" in seen  # drawn in place with cursor movement, not printed line after line
    assert b"Traceback" not in with_rest and b"KeyboardInterrupt" not in with_rest
