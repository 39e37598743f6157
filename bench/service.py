"""Suite ``service``: ``cassieq serve`` over HTTP on loopback, per instance.

Three paths, each with ``clients`` concurrent HTTP client threads (keep-alive connections,
100-byte messages), bounded in count and in time:

* **put**: v1 ``POST .../messages``, one message a request;
* **get+ack**: v1 ``GET .../messages/next`` then ``DELETE .../messages?popReceipt=``;
* **batch receive+ack**: v2 ``GET .../messages?max=100`` then ``POST .../messages/ack`` with
  the receipts (the queue filled beforehand through the engine, untimed).

Each path runs against 1 instance and against 2 instances (clients round-robin over them),
alternating 1, 2, 1, 2 ... per repeat so drifting load hits both alike; figures are msg/s in
total and per instance, and p50/p99 latency per request (ms). Every run checks its work: every
put answered 201, every message consumed was acked (204 / status ``ok``), the queue is empty.

The original CassieQ server (Java) is the baseline the issue names. It is in no package
registry: the suite takes a source checkout from ``--original-src`` / ``CASSIEQ_ORIGINAL_SRC``
and is recorded as skipped with a one-line reason without one. With one it is skipped too,
saying why: on this machine's Java 17 the original builds with a few changes but does not
start (bench/README.md, the service suite).
"""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import BenchConfig, SuiteUnavailable, client, payloads, percentile, summarize

log = logging.getLogger("bench")

ORIGINAL_ENV = "CASSIEQ_ORIGINAL_SRC"
SIZE = 100
BATCH = 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Instance:
    def __init__(self, cfg: BenchConfig, tmp: Path, secret: Path, admin: Path):
        self.port = _free_port()
        self.log_path = tmp / f"serve-{self.port}.log"
        argv = [
            sys.executable, "-m", "cassieq_spark.cli",
            "--contact-points", cfg.contact_points, "--port", str(cfg.port),
            "--keyspace", cfg.keyspace,
            "serve", "--http-port", str(self.port),
            "--secret-file", str(secret), "--admin-key-file", str(admin),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("CASSIEQ_")}
        self.proc = subprocess.Popen(
            argv, stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cassieq serve exited: {self.log_path.read_text()[-2000:]}")
            try:
                if request(self.port, "GET", "/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("cassieq serve not ready in 90 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def request(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class Client:
    """One thread's keep-alive connections, one per instance, used round-robin."""

    def __init__(self, ports: list[int], auth: dict[str, str]):
        self.conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=60) for p in ports]
        self.turn = itertools.cycle(range(len(ports)))
        self.auth = auth
        self.latencies: list[float] = []

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = self.conns[next(self.turn)]
        t0 = time.perf_counter()
        try:
            conn.request(method, path, body=body, headers=self.auth)
            r = conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # the server closed an idle keep-alive connection before reading this request
            # (uvicorn's keep-alive timeout): a new connection, once, as HTTP clients do
            conn.close()
            t0 = time.perf_counter()
            conn.request(method, path, body=body, headers=self.auth)
            r = conn.getresponse()
        data = r.read()
        self.latencies.append(time.perf_counter() - t0)
        return r.status, data

    def close(self) -> None:
        for c in self.conns:
            c.close()


def _run_threads(n: int, work) -> tuple[float, list[Client]]:
    errors: list[BaseException] = []
    clients: list[Client] = []
    lock = threading.Lock()

    def body(i: int) -> None:
        try:
            c = work(i)
            with lock:
                clients.append(c)
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed, clients


def _phase(ports, auth, threads: int, count: int, seconds: float, step) -> dict:
    """``step(client) -> messages done`` repeatedly over ``threads`` until ``count`` or time."""
    done = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def work(_i: int) -> Client:
        c = Client(ports, auth)
        try:
            while time.monotonic() < deadline:
                with lock:
                    if done[0] >= count:
                        break
                n = step(c)
                if n == 0:
                    break  # nothing left
                with lock:
                    done[0] += n
        finally:
            c.close()
        return c

    elapsed, clients = _run_threads(threads, work)
    lat = sorted(x for c in clients for x in c.latencies)
    return {
        "messages": done[0],
        "seconds": elapsed,
        "rate": done[0] / elapsed if elapsed else 0.0,
        "p50_ms": (percentile(lat, 50) or 0) * 1000,
        "p99_ms": (percentile(lat, 99) or 0) * 1000,
        "requests": len(lat),
    }


def one_run(cfg: BenchConfig, ports: list[int], admin_port: int, auth, account: str, size) -> dict:
    """The three paths on a fresh queue against ``ports``."""
    queue = f"q{secrets.token_hex(4)}"
    base = f"/api/v1/accounts/{account}/queues"
    status, body = request(
        admin_port, "POST", base, json.dumps({"queueName": queue}).encode(), auth
    )
    assert status == 201, (status, body)
    bodies = iter(payloads(size["put"] + size["threads"], SIZE, salt=ports[-1]))
    body_lock = threading.Lock()

    def put(c: Client) -> int:
        with body_lock:
            payload = next(bodies)
        status, raw = c.call("POST", f"{base}/{queue}/messages", payload)
        assert status == 201, (status, raw)
        return 1

    def get_ack(c: Client) -> int:
        status, raw = c.call("GET", f"{base}/{queue}/messages/next")
        if status == 204:
            return 0
        assert status == 200, (status, raw)
        receipt = json.loads(raw)["popReceipt"]
        status, raw = c.call("DELETE", f"{base}/{queue}/messages?popReceipt={receipt}")
        assert status == 204, (status, raw)
        return 1

    v2 = f"/api/v2/accounts/{account}/queues/{queue}/messages"

    def batch(c: Client) -> int:
        status, raw = c.call("GET", f"{v2}?max={BATCH}")
        assert status == 200, (status, raw)
        receipts = [m["popReceipt"] for m in json.loads(raw)["messages"]]
        if not receipts:
            return 0
        status, raw = c.call("POST", f"{v2}/ack", json.dumps({"popReceipts": receipts}).encode())
        assert status == 200, (status, raw)
        results = json.loads(raw)["results"]
        assert all(r["status"] == "ok" for r in results), results
        return len(receipts)

    out = {"put": _phase(ports, auth, size["threads"], size["put"], size["seconds"], put)}
    # get+ack consumes part of what was put; the rest is purged before the batch phase
    out["get_ack"] = _phase(ports, auth, size["threads"], size["get_ack"], size["seconds"], get_ack)
    name = f"{account}.{queue}"
    with client(cfg) as q:
        q.purge(name)
        for chunk in range(0, size["batch"], 1000):
            n = min(1000, size["batch"] - chunk)
            q.put_many(name, payloads(n, SIZE, salt=chunk))
    out["batch"] = _phase(ports, auth, size["threads"], size["batch"], size["seconds"], batch)
    with client(cfg) as q:
        left = q.stats(name)
    assert out["batch"]["messages"] == size["batch"] or out["batch"]["seconds"] >= size["seconds"]
    if out["batch"]["messages"] == size["batch"]:
        assert left["backlog"] == 0 and left["in_flight"] == 0, left
    status, _ = request(admin_port, "DELETE", f"{base}/{queue}", None, auth)
    assert status == 200
    return out


def original_baseline(cfg: BenchConfig) -> dict:
    src = cfg.original_src or os.environ.get(ORIGINAL_ENV)
    if not src:
        return {
            "status": "skipped",
            "reason": f"no original CassieQ checkout given (--original-src or {ORIGINAL_ENV})",
        }
    return {
        "status": "skipped",
        "reason": f"checkout {src} given, but running the original on Java 17 is not automated: "
        "it stops at start in jersey2-guice (Field.modifiers, hidden since Java 12); "
        "bench/README.md says what was tried",
    }


def run(cfg: BenchConfig) -> dict:
    size = {
        "threads": 8,
        "put": 1000 if cfg.quick else 4000,
        "get_ack": 500 if cfg.quick else 2000,
        "batch": 5000 if cfg.quick else 20000,
        "seconds": 60.0 if cfg.quick else 180.0,
    }
    try:
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise SuiteUnavailable(f"the [server] extra is not installed ({exc})") from exc
    with tempfile.TemporaryDirectory(prefix="bench-service-") as d:
        tmp = Path(d)
        secret, admin = tmp / "secret", tmp / "admin"
        secret.write_text(secrets.token_urlsafe(32))
        admin_key = secrets.token_urlsafe(24)
        admin.write_text(admin_key)
        instances = [Instance(cfg, tmp, secret, admin)]
        try:
            instances.append(Instance(cfg, tmp, secret, admin))
            a = instances[0].port
            account = f"bench{secrets.token_hex(4)}"
            status, raw = request(
                a,
                "POST",
                "/admin/api/v1/accounts",
                json.dumps(account).encode(),
                {"Authorization": f"Key {admin_key}"},
            )
            assert status == 201, (status, raw)
            auth = {"Authorization": f"Key {json.loads(raw)['keys']['primary']}"}
            runs: dict[int, list[dict]] = {1: [], 2: []}
            for rep in range(cfg.repeats):
                for n in (1, 2):
                    r = one_run(cfg, [i.port for i in instances[:n]], a, auth, account, size)
                    log.info(
                        "service repeat %d, %d instance(s): put %.0f, get+ack %.0f, batch %.0f msg/s",
                        rep + 1,
                        n,
                        r["put"]["rate"],
                        r["get_ack"]["rate"],
                        r["batch"]["rate"],
                    )
                    runs[n].append(r)
        finally:
            for i in instances:
                i.stop()
    out: dict = {"size": size, "message_bytes": SIZE, "instances": {}}
    for n, rs in runs.items():
        per: dict = {}
        for path in ("put", "get_ack", "batch"):
            per[path] = {
                "rate": summarize([r[path]["rate"] for r in rs]),
                "rate_per_instance": summarize([r[path]["rate"] / n for r in rs]),
                "p50_ms": summarize([r[path]["p50_ms"] for r in rs]),
                "p99_ms": summarize([r[path]["p99_ms"] for r in rs]),
                "messages": [r[path]["messages"] for r in rs],
            }
        out["instances"][str(n)] = per
    one, two = out["instances"]["1"], out["instances"]["2"]
    out["two_vs_one"] = {
        p: two[p]["rate"]["median"] / one[p]["rate"]["median"]
        for p in ("put", "get_ack", "batch")
        if one[p]["rate"]["median"]
    }
    out["batch_vs_get_ack"] = one["batch"]["rate"]["median"] / one["get_ack"]["rate"]["median"]
    out["original"] = original_baseline(cfg)
    return out


def markdown(entry: dict) -> list[str]:
    """The suite's table for the run's report."""
    if entry.get("status") != "ok":
        return []
    s = entry["size"]
    lines = [
        "",
        f"## Service (cassieq serve over HTTP on loopback; {s['threads']} client threads, "
        f"{entry['message_bytes']} B messages; put {s['put']}, get+ack {s['get_ack']}, "
        f"batch {s['batch']} per run, at most {s['seconds']:.0f} s each)",
        "",
        "| path | instances | msg/s total | msg/s per instance | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {"put": "put", "get_ack": "get+ack", "batch": f"batch receive+ack ({BATCH})"}
    for path, label in names.items():
        for n in ("1", "2"):
            r = entry["instances"][n][path]
            lines.append(
                f"| {label} | {n} | {r['rate']['median']:,.0f} "
                f"({r['rate']['min']:,.0f}-{r['rate']['max']:,.0f}) | "
                f"{r['rate_per_instance']['median']:,.0f} | {r['p50_ms']['median']:.1f} | "
                f"{r['p99_ms']['median']:.1f} |"
            )
    ratios = ", ".join(f"{names[p]} {v:.2f}" for p, v in entry["two_vs_one"].items())
    lines += [
        "",
        f"2 instances / 1 (total msg/s): {ratios}. Batch receive+ack / get+ack (1 instance): "
        f"{entry['batch_vs_get_ack']:.1f}x.",
        f"Original CassieQ server: {entry['original']['status']}: "
        f"{entry['original'].get('reason', '')}",
    ]
    return lines
