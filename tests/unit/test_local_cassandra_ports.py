"""Port choice and one-line failures of the launcher, against real sockets (no Cassandra)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cassieq_dev.local_cassandra import free_port, port_free, port_open

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def listener() -> Iterator[int]:
    """A port held by a plain listening socket; yields its number."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_a_listened_port_is_not_free(listener: int) -> None:
    assert port_open("127.0.0.1", listener)
    assert not port_free("127.0.0.1", listener)


def test_free_port_skips_the_taken_one(listener: int) -> None:
    port = free_port(["127.0.0.1"], above=listener - 1)
    assert port != listener
    assert listener < port <= listener + 100
    assert port_free("127.0.0.1", port)


def test_free_port_avoids_the_ports_asked_to(listener: int) -> None:
    first = free_port(["127.0.0.1"], above=listener)
    second = free_port(["127.0.0.1"], above=listener, avoid={first})
    assert second != first and port_free("127.0.0.1", second)


def _up_without_java(tmp_path: Path, debug: str) -> subprocess.CompletedProcess[str]:
    port = free_port(["127.0.0.1"], above=29500)
    storage = free_port(["127.0.0.1"], above=27500)
    env = {**os.environ, "PATH": "/nonexistent", "DEBUG": debug, "PYTHONPATH": str(ROOT)}
    env.pop("JAVA_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "cassieq_dev.local_cassandra", "up", "--port", str(port)]
        + ["--storage-port", str(storage), "--base-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )


def test_a_failed_up_is_one_line_without_traceback(tmp_path: Path) -> None:
    done = _up_without_java(tmp_path, debug="")
    assert done.returncode == 1
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1, done.stderr
    # No java (or, on a machine without `make setup`, no jars): either names the fix.
    assert errors[0].startswith("cassandra-up failed: "), errors
    assert "JAVA_HOME" in errors[0] or "make setup" in errors[0], errors
    assert "DEBUG=1" in errors[0]
    assert "Traceback" not in done.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = _up_without_java(tmp_path, debug="1")
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("cassandra-up failed: ")
