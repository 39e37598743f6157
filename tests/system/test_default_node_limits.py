"""The node ``make cassandra-up`` starts survives the product's own limits and keeps what it
acknowledged.

One node started exactly as ``make cassandra-up`` starts it (``python -m
cassieq_dev.local_cassandra up`` with no flags but its own port and directory, so the shared
node on 9042 is never touched):

- the largest writes and reads the API allows: messages of the largest ``max_payload_bytes``,
  put in one call, received by one ``get_many`` of the largest batch and peeked at; the node's
  JVM is still the same process afterwards and answers CQL (N389: a 512 MB node died of
  OutOfMemoryError under six 15 MiB messages and one ``get_many``);
- durability: a producer puts messages one by one, the node's JVM is SIGKILLed under it, the
  node is started again the same way: every message whose ``put`` returned is there, counted
  by id;
- the port: after a SIGKILL, ``make cassandra-up`` with the same port brings the node back on
  that port, also when something else held it for a moment; held for longer, it fails with one
  line naming the process that holds it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from cassieq_dev.local_cassandra import STATE_DIR, query_release_version
from cassieq_dev.local_cassandra.config import ROOT
from cassieq_spark.client import QueueClient
from cassieq_spark.engine.core.queues import MAX_PAYLOAD_LIMIT
from cassieq_spark.validate import MAX_BATCH

# Beside the shared node (9042) and the cluster tests (19042, 29042); below Linux's ephemeral
# range (32768-60999), where a port can be taken as the local end of an outgoing connection.
PORT = 22042
STORAGE_PORT = 22000
BASE_DIR = STATE_DIR / "default-node-limits"
KEYSPACE = "cassieq_default_node"


def _launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cassieq_dev.local_cassandra", *args, "--base-dir", str(BASE_DIR)],
        capture_output=True,
        text=True,
        timeout=400,
    )


def _up() -> float:
    """Start the node with `make cassandra-up`'s defaults; seconds until it answered CQL."""
    started = time.monotonic()
    done = _launcher("up", "--port", str(PORT), "--storage-port", str(STORAGE_PORT))
    assert done.returncode == 0, done.stdout + done.stderr
    return time.monotonic() - started


def _jvm_pid() -> int:
    return int((BASE_DIR / "1" / "cassandra.pid").read_text().split()[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def default_node() -> Iterator[float]:
    _launcher("down")
    subprocess.run(["rm", "-rf", str(BASE_DIR)], check=True)
    seconds = _up()
    try:
        yield seconds
    finally:
        _launcher("down")


def _client() -> QueueClient:
    return QueueClient.connect(["127.0.0.1"], port=PORT, keyspace=KEYSPACE)


def test_default_node_survives_the_largest_payloads_and_batch_read(default_node: float) -> None:
    """N389: max payloads put in one call, one get_many of the largest batch, one peek."""
    pid = _jvm_pid()
    q = _client()
    try:
        q.bootstrap(create_keyspace=True)
        name = f"big_{uuid.uuid4().hex[:8]}"
        q.create_queue(name, max_payload_bytes=MAX_PAYLOAD_LIMIT)
        count = 12  # twice the six that killed a 512 MB node
        payloads = [bytes([65 + i]) * MAX_PAYLOAD_LIMIT for i in range(count)]
        ids = q.put_many(name, payloads)
        del payloads
        assert len(ids) == count
        peeked = q.peek(name, limit=count)
        assert len(peeked) == count
        assert all(len(m.payload) == MAX_PAYLOAD_LIMIT for m in peeked)
        del peeked
        got = q.get_many(name, max_messages=MAX_BATCH, visibility_timeout=600)
        seen = {m.id: m.payload[:1] for m in got}
        assert sorted(seen) == sorted(ids)
        assert all(len(m.payload) == MAX_PAYLOAD_LIMIT for m in got)
    finally:
        q.close()
    assert _alive(pid), "the Cassandra node died (see its logs under " + str(BASE_DIR) + ")"
    q = _client()
    try:
        assert q.stats(name)["in_flight"] == count
    finally:
        q.close()
    assert _jvm_pid() == pid


def test_default_node_keeps_every_acknowledged_put_through_a_sigkill(default_node: float) -> None:
    """Durable by default: puts that returned survive a SIGKILL of the node's JVM."""
    q = _client()
    q.bootstrap(create_keyspace=True)
    name = f"dur_{uuid.uuid4().hex[:8]}"
    q.create_queue(name)
    acked: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                acked.append(q.put(name, f"m{i}".encode()))
            except BaseException as exc:  # the node died under us: that is the point
                errors.append(exc)
                return
            i += 1

    producer = threading.Thread(target=produce)
    started = time.monotonic()
    producer.start()
    while len(acked) < 300 and producer.is_alive() and time.monotonic() - started < 120:
        time.sleep(0.05)
    pid = _jvm_pid()
    os.kill(pid, signal.SIGKILL)
    killed_at = len(acked)
    producer.join(timeout=120)
    stop.set()
    q.close()
    assert killed_at >= 300, f"only {killed_at} puts returned before the kill: {errors!r}"
    while _alive(pid):
        time.sleep(0.1)
    restart = _up()
    q = _client()
    try:
        found: set[int] = set()
        while True:
            batch = q.get_many(name, max_messages=MAX_BATCH, visibility_timeout=600)
            if not batch:
                break
            found.update(m.id for m in batch)
    finally:
        q.close()
    missing = sorted(set(acked) - found)
    print(
        f"\ndurability: {len(acked)} puts returned before the SIGKILL, {len(found)} found after "
        f"the restart, missing {len(missing)}; first start {default_node:.1f} s, restart "
        f"{restart:.1f} s"
    )
    assert not missing, f"{len(missing)} acknowledged puts lost, e.g. {missing[:10]}"


def _make_up() -> subprocess.Popen[str]:
    """`make cassandra-up` for this module's port and directory, as a user types it."""
    return subprocess.Popen(
        ["make", "-s", "cassandra-up", f"CASSANDRA_PORT={PORT}", f"CASSANDRA_BASE_DIR={BASE_DIR}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class _PortHolder:
    """A listener on the node's port that is not Cassandra: it accepts and closes at once."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 30
        while True:  # the killed JVM's listener goes away a moment after the kill
            try:
                self.sock.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} still held 30 s after the kill"
                time.sleep(0.05)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.close()

    def close(self) -> None:
        self.closed.set()
        self.thread.join()
        self.sock.close()


def test_a_killed_node_comes_back_on_the_port_it_was_asked_for(default_node: float) -> None:
    pid = _jvm_pid()
    os.kill(pid, signal.SIGKILL)
    holder = _PortHolder(PORT)
    try:
        # Held for longer than the launcher waits: one line that names the holder, no move.
        refused = _make_up()
        _, err = refused.communicate(timeout=300)
        assert refused.returncode != 0
        said = [line for line in err.splitlines() if not line.startswith("make")]
        assert len(said) == 1, err
        assert f"127.0.0.1:{PORT} is held by" in said[0] and f"(pid {os.getpid()})" in said[0]
        assert json.loads((BASE_DIR / "1" / "node.json").read_text())["port"] == PORT
        # Held for a moment (as the killed JVM's own listener is): the node comes back there.
        started = time.monotonic()
        restarted = _make_up()
        time.sleep(2)
    finally:
        holder.close()
    out, err = restarted.communicate(timeout=400)
    assert restarted.returncode == 0, out + err
    print(f"\nrestart on the same port after the holder let go: {time.monotonic() - started:.1f} s")
    assert f"127.0.0.1:{PORT}" in out and "taken" not in out + err, out + err
    record = json.loads((BASE_DIR / "1" / "node.json").read_text())
    assert (record["port"], record["storage_port"]) == (PORT, STORAGE_PORT), record
    assert _jvm_pid() != pid
    assert (query_release_version("127.0.0.1", PORT) or "").startswith("5.")
