"""The HTTP service under test: real ``cassieq serve`` processes (uvicorn) on loopback ports
against the Cassandra under test, and a tiny HTTP client on the standard library (so the
tests speak raw HTTP, headers and bodies exactly as written).

Nothing is mocked: requests go over TCP to the server, the server to Cassandra.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    tls: ssl.SSLContext | None = None,
    host: str = LOOPBACK,
) -> Reply:
    """One request on a new connection; ``tls``: HTTPS verified with that context."""
    conn = (
        http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)
        if tls is not None
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        data = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


@dataclass
class Server:
    """One ``cassieq serve`` process."""

    port: int
    admin_key: str
    keyspace: str
    proc: subprocess.Popen
    log_path: Path
    extra: list[str] = field(default_factory=list)
    tls: ssl.SSLContext | None = None

    def call(self, method: str, path: str, body=None, headers=None, timeout: float = 30.0) -> Reply:
        return request(self.port, method, path, body, headers, timeout, self.tls)

    def admin(self, method: str, path: str, body: Any = None) -> Reply:
        data = None if body is None else json.dumps(body)
        return self.call(
            method,
            "/admin/api/v1" + path,
            data,
            {"Authorization": f"Key {self.admin_key}", "Content-Type": "application/json"},
        )

    def operator(self) -> dict[str, str]:
        """The header of a request for /metrics or the dashboard data (the admin key)."""
        return {"Authorization": f"Bearer {self.admin_key}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def start_server(
    tmp: Path,
    contact_points: list[str],
    cql_port: int,
    keyspace: str,
    secret: str,
    admin_key: str,
    *extra: str,
    port: int | None = None,
    env: dict[str, str] | None = None,
    connection_flags: bool = True,
    tls: ssl.SSLContext | None = None,
) -> Server:
    """``tls``: the server serves HTTPS (``extra`` names its cert and key); the harness talks
    to it with this client context."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "secret").write_text(secret)
    (tmp / "admin").write_text(admin_key)
    port = port or free_port()
    log_path = tmp / f"server-{port}-{secrets.token_hex(3)}.log"
    argv = [
        sys.executable,
        "-m",
        "cassieq_spark.cli",
        *(
            ["--contact-points", ",".join(contact_points), "--keyspace", keyspace]
            if connection_flags
            else []
        ),
        "--port",
        str(cql_port),
        "serve",
        "--http-port",
        str(port),
        "--secret-file",
        str(tmp / "secret"),
        "--admin-key-file",
        str(tmp / "admin"),
        *extra,
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CASSIEQ_")}
    out = log_path.open("wb")
    proc = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, env={**clean, **(env or {})}
    )
    server = Server(port, admin_key, keyspace, proc, log_path, list(extra), tls)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"cassieq serve exited {proc.returncode}:\n{server.log()}")
        try:
            if server.call("GET", "/ready", timeout=5).status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop(signal.SIGKILL)
    raise RuntimeError(f"cassieq serve did not get ready in 60 s:\n{server.log()}")


def start_server_on(tmp: Path, cassandra, keyspace: str, *extra: str, **kw) -> Server:
    """``cassieq serve`` on the Cassandra under test (the ``cassandra`` fixture) and
    ``keyspace``, with a fresh secret and admin key (``Server.admin_key``)."""
    return start_server(
        tmp,
        cassandra.contact_points,
        cassandra.port,
        keyspace,
        secrets.token_urlsafe(32),
        secrets.token_urlsafe(24),
        *extra,
        **kw,
    )


def start_test_server(tmp: Path, cassandra, options: dict, *extra: str, **kw) -> Server:
    """``cassieq serve`` on the Cassandra under test (the ``cassandra`` fixture) and the test
    keyspace of ``options`` (``cassieq_options``), with a fresh secret and admin key."""
    return start_server_on(tmp, cassandra, options["keyspace"], *extra, **kw)


# -- signing, written from the spec's description (not from the service's module) -------------


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def hmac_sig(key: str, text: str) -> str:
    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    return b64url(hmac.new(raw, text.encode(), hashlib.sha256).digest())


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def signed_headers(
    account: str, key: str, method: str, path: str, when: float | None = None
) -> dict:
    stamp = utc(time.time() if when is None else when)
    canonical = "/" + path.split("?", 1)[0].strip("/")
    sig = hmac_sig(key, "\n".join([account, method, canonical, stamp]))
    return {"Authorization": f"Signed {sig}", "X-Cassieq-Request-Time": stamp}


def metric(text: str, name: str) -> float:
    """The value of the unlabelled metric ``name`` in a Prometheus scrape ``text``."""
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))
