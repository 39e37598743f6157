"""Which Cassandra `make cassandra-up`, `make demo` and the test harness use when the port is taken:
a Cassandra 5.x already there is used and left running; anything else makes the embedded node
start on a free port, which the launcher names."""

from __future__ import annotations

import os
import re
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cassieq_dev.local_cassandra import (
    ensure_cassandra,
    free_port,
    port_free,
    query_release_version,
    recorded_nodes,
    stop_recorded,
)

if TYPE_CHECKING:
    from conftest import CassandraEndpoint

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"


def _launcher(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cassieq_dev.local_cassandra", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=600,
    )


def _loopback_port(cassandra: CassandraEndpoint) -> int:
    if LOOPBACK not in cassandra.contact_points:
        pytest.skip(f"the Cassandra under test is not on {LOOPBACK}: {cassandra.contact_points}")
    return cassandra.port


def test_a_cassandra_already_answering_is_used_and_left_running(
    cassandra: CassandraEndpoint, tmp_path: Path
) -> None:
    port = _loopback_port(cassandra)
    said: list[str] = []
    # An empty base dir: this launcher has started nothing, so what answers is someone else's.
    found = ensure_cassandra(port=port, base_dir=tmp_path, say=said.append)
    assert found.external and found.launcher is None
    assert found.port == port and found.contact_points == [LOOPBACK]
    assert found.release_version is not None and found.release_version.startswith("5.")
    assert said == [found.message]
    assert f"already answering on {LOOPBACK}:{port}" in found.message
    assert "left running" in found.message
    found.stop_started()
    assert query_release_version(LOOPBACK, port) == found.release_version
    assert not recorded_nodes(tmp_path)  # nothing was started or recorded


def test_cassandra_up_uses_the_running_cassandra(
    cassandra: CassandraEndpoint, tmp_path: Path
) -> None:
    port = _loopback_port(cassandra)
    done = _launcher("up", "--port", str(port), "--base-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("using the Cassandra 5.")
    assert f"{LOOPBACK}:{port}" in lines[0]
    assert query_release_version(LOOPBACK, port) is not None


class _NotCassandra(socketserver.BaseRequestHandler):
    """Answers anything with an HTTP error, as a web server squatting the port would."""

    def handle(self) -> None:
        self.request.recv(1024)
        self.request.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")


@pytest.fixture
def squatter() -> Iterator[int]:
    """A plain Python TCP server on a loopback port (29042 when free); yields the port."""
    port = 29042 if port_free(LOOPBACK, 29042) else free_port([LOOPBACK], above=29100)
    server = socketserver.ThreadingTCPServer((LOOPBACK, port), _NotCassandra)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def test_a_non_cassandra_listener_moves_the_embedded_node_to_a_free_port(
    squatter: int, tmp_path: Path
) -> None:
    storage = 27000 if port_free(LOOPBACK, 27000) else free_port([LOOPBACK], above=27100)
    base = tmp_path / "nodes"
    args = ["--port", str(squatter), "--storage-port", str(storage), "--base-dir", str(base)]
    try:
        done = _launcher("up", *args)
        assert done.returncode == 0, done.stderr
        said = done.stdout.strip().splitlines()
        assert said[0].startswith(
            f"{LOOPBACK}:{squatter} is taken by something that does not answer CQL; "
            "starting the embedded Cassandra 5.0 on"
        ), said
        (node,) = recorded_nodes(base)
        assert node.port != squatter and node.requested_port == squatter
        assert node.storage_port == storage
        assert f"on {LOOPBACK}:{node.port}" in said[0]
        assert any(
            f"started the embedded Cassandra 5.0 on {LOOPBACK}:{node.port}" in s for s in said
        )
        assert (query_release_version(LOOPBACK, node.port) or "").startswith("5.0")

        # Asking for the squatted port again finds the moved node instead of starting another.
        again = _launcher("up", *args)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(
            f"using the embedded Cassandra already running on {LOOPBACK}:{node.port} "
            f"(for port {squatter}, which is taken)"
        ), again.stdout
        assert len(recorded_nodes(base)) == 1
        status = _launcher("status", "--base-dir", str(base))
        assert status.returncode == 0, status.stderr
        assert f"{LOOPBACK}:{node.port} (for port {squatter}) durable: running" in status.stdout
    finally:
        stopped = stop_recorded(base)
    assert stopped == 1


@pytest.mark.spark
def test_demo_uses_the_running_cassandra_and_leaves_it_running(
    cassandra: CassandraEndpoint, tmp_path: Path
) -> None:
    port = _loopback_port(cassandra)
    out = tmp_path / "demo-out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "demo.py"), "--seconds", "4", "--port", str(port)]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    said = [line for line in done.stdout.splitlines() if line.startswith("[demo ")]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "using the Cassandra 5.0" in said[0] or "using the embedded Cassandra" in said[0]
    assert f"127.0.0.1:{port}" in said[0]
    assert said[-1].endswith("OK: every enqueued message was delivered and acked"), said
    assert not any("stopping the Cassandra" in line for line in said)
    assert query_release_version(LOOPBACK, port) is not None
    # The live view, off a terminal: one plain line per refresh, the counts rising.
    watched = [line for line in said if "] watch queue=demo " in line]
    assert len(watched) >= 3, said
    assert "enqueued=0 " in watched[0] and "\x1b" not in done.stdout
    assert any(re.search(r" acked=[1-9]\d* ", line) for line in watched), watched
    # It ends with a plot next to its log, whose paths it prints.
    log, png = out / "demo.log", out / "demo-enqueued-vs-acked.png"
    assert f"plot of enqueued vs acked over time: {png}" in said[-2], said[-3:]
    assert f"log: {log}" in said[-3]
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    logged = log.read_text()
    assert "watch queue=demo " in logged and logged.rstrip().endswith(said[-1].split("] ", 1)[1])
