"""The service and client smoke test, run as a script by the Python of another venv.

``python service_smoke.py HOSTS PORT KEYSPACE`` starts ``cassieq serve`` of the interpreter
that runs it (``python -m cassieq_spark``) on a free loopback port against the Cassandra at
HOSTS:PORT, then over real HTTP: an account through the admin API, a queue, a put, a next and
an ack; through ``QueueClient`` a put, a get and an ack on the same queue (engine name
``account.queue``), and a message put over HTTP read by the client. Prints one JSON line of
what it saw and exits 0, or exits 1 with the reason and the server's log. Only the standard
library and the installed ``cassieq_spark``: it runs from a venv that holds a wheel and
nothing of this checkout.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
VERSIONS_OF = (
    "cassandra-driver",
    "greenlet",
    "starlette",
    "uvicorn",
    "cryptography",
    "prometheus-client",
    "opentelemetry-api",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _call(port: int, method: str, path: str, body: str | None = None, key: str = "") -> Any:
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=30)
    try:
        headers = {"Authorization": f"Key {key}"} if key else {}
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        return reply.status, (json.loads(data) if data.strip() else None)
    finally:
        conn.close()


def _installed() -> dict[str, str]:
    found = {}
    for name in VERSIONS_OF:
        try:
            found[name] = version(name)
        except Exception:  # not installed: not part of this venv's extras
            continue
    return found


def main(argv: list[str]) -> int:
    hosts, cql_port, keyspace = argv[0], argv[1], argv[2]
    work = Path(tempfile.mkdtemp(prefix="cassieq-smoke-"))
    (work / "secret").write_text(secrets.token_urlsafe(32))
    admin = secrets.token_urlsafe(24)
    (work / "admin").write_text(admin)
    port = _free_port()
    log_path = work / "serve.log"
    flags = ["--contact-points", hosts, "--port", cql_port, "--keyspace", keyspace]
    serve = [sys.executable, "-m", "cassieq_spark", *flags, "serve", "--bootstrap"]
    serve += ["--create-keyspace", "--http-port", str(port)]
    serve += ["--secret-file", str(work / "secret"), "--admin-key-file", str(work / "admin")]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"cassieq serve exited {proc.returncode}")
            try:
                if _call(port, "GET", "/ready")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("cassieq serve not ready in 90 s")
            time.sleep(0.2)
        status, created = _call(port, "POST", "/admin/api/v1/accounts", '"smoke"', admin)
        assert status == 201, (status, created)
        key = created["keys"]["primary"]
        queues = "/api/v1/accounts/smoke/queues"
        status, _ = _call(port, "POST", queues, '{"queueName": "jobs"}', key)
        assert status == 201, status
        status, _ = _call(port, "POST", f"{queues}/jobs/messages", "over http", key)
        assert status == 201, status
        status, got = _call(port, "GET", f"{queues}/jobs/messages/next", None, key)
        assert status == 200 and got["message"] == "over http", (status, got)
        receipt = got["popReceipt"]
        status, _ = _call(port, "DELETE", f"{queues}/jobs/messages?popReceipt={receipt}", None, key)
        assert status == 204, status

        from cassieq_spark import ConnectionConfig, QueueClient

        config = ConnectionConfig(
            contact_points=tuple(hosts.split(",")), port=int(cql_port), keyspace=keyspace
        )
        _call(port, "POST", f"{queues}/jobs/messages", "http to client", key)
        with QueueClient(config) as client:
            client.put("smoke.jobs", b"from the client")
            seen = []
            for _ in range(2):
                message = client.get("smoke.jobs")
                assert message is not None
                seen.append(message.payload.decode())
                client.ack("smoke.jobs", message.pop_receipt)
            assert client.get("smoke.jobs") is None
        assert sorted(seen) == ["from the client", "http to client"], seen
        print(json.dumps({"ok": True, "versions": _installed()}))  # noqa: T201
        return 0
    except Exception as exc:
        proc.terminate()
        proc.wait(30)
        sys.stderr.write(f"smoke test failed: {exc!r}\n{log_path.read_text(errors='replace')}\n")
        return 1
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
