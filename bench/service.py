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

The original CassieQ server (Java) is the baseline the issue names (put and get+ack >= 2x it
per instance, batch receive+ack >= 10x its get+ack): given a built checkout
(``--original-src`` / ``CASSIEQ_ORIGINAL_SRC``; bench/original_server.py says what it needs and
adds), one original server runs beside ours on loopback against the same Cassandra (a keyspace
of its own) and each repeat measures its put and get+ack with the same client threads, sizes
and checks right after ours, so drifting load hits both alike. The ratios are computed in the
same run. Without a checkout it is recorded as skipped with a one-line reason (CI); when it
cannot be prepared or started, the same, with the reason, and our figures stand alone.
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
from urllib.parse import quote

from . import original_server
from .common import BenchConfig, SuiteUnavailable, client, payloads, percentile, summarize
from .original_server import request, stop_process

log = logging.getLogger("bench")

SIZE = 100
BATCH = 100
# the original server's untimed warm-up (JIT), on a queue of its own
WARM_UP = {"threads": 8, "put": 300, "get_ack": 300, "batch": 0, "seconds": 60.0}
EMPTY_TRIES = 3  # consecutive 204s from next before a get+ack thread stops


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
        stop_process(self.proc)


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


def _put_and_get_ack(ports, auth, base: str, queue: str, size, salt: int) -> dict:
    """Put ``size["put"]`` 100-byte messages, then get+ack ``size["get_ack"]`` of them, with
    ``size["threads"]`` client threads over ``ports``: the paths both servers have (API v1)."""
    bodies = iter(payloads(size["put"] + size["threads"], SIZE, salt=salt))
    body_lock = threading.Lock()

    def put(c: Client) -> int:
        with body_lock:
            payload = next(bodies)
        status, raw = c.call("POST", f"{base}/{queue}/messages", payload)
        assert status == 201, (status, raw)
        return 1

    def get_ack(c: Client) -> int:
        # A 204 can come while messages remain (the original returns one when every visible
        # message of its current bucket is taken by other readers): a thread stops after
        # EMPTY_TRIES of them in a row, not at the first.
        for _ in range(EMPTY_TRIES):
            status, raw = c.call("GET", f"{base}/{queue}/messages/next")
            if status != 204:
                break
        else:
            return 0
        assert status == 200, (status, raw)
        receipt = quote(json.loads(raw)["popReceipt"], safe="")
        status, raw = c.call("DELETE", f"{base}/{queue}/messages?popReceipt={receipt}")
        assert status == 204, (status, raw)
        return 1

    out = {"put": _phase(ports, auth, size["threads"], size["put"], size["seconds"], put)}
    # get+ack consumes part of what was put
    out["get_ack"] = _phase(ports, auth, size["threads"], size["get_ack"], size["seconds"], get_ack)
    assert out["put"]["messages"] >= size["put"] or out["put"]["seconds"] >= size["seconds"]
    return out


def one_run(cfg: BenchConfig, ports: list[int], admin_port: int, auth, account: str, size) -> dict:
    """The three paths on a fresh queue against ``ports``."""
    queue = f"q{secrets.token_hex(4)}"
    base = f"/api/v1/accounts/{account}/queues"
    status, body = request(
        admin_port, "POST", base, json.dumps({"queueName": queue}).encode(), auth
    )
    assert status == 201, (status, body)
    out = _put_and_get_ack(ports, auth, base, queue, size, salt=ports[-1])
    # the rest of what was put is purged before the batch phase
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


def original_run(server: original_server.OriginalServer, auth, account: str, size) -> dict:
    """Put and get+ack on a fresh queue of the original server (default settings, as ours)."""
    queue = f"q{secrets.token_hex(4)}"
    base = f"/api/v1/accounts/{account}/queues"
    status, body = request(
        server.app_port,
        "POST",
        base,
        json.dumps({"queueName": queue}).encode(),
        {**auth, "Content-Type": "application/json"},
    )
    assert status == 201, (status, body)
    return _put_and_get_ack([server.app_port], auth, base, queue, size, salt=server.app_port)


class Baseline:
    """The original server for the whole suite, or the reason it is not measured."""

    def __init__(self, cfg: BenchConfig, tmp: Path):
        self.server: original_server.OriginalServer | None = None
        self.runs: list[dict] = []
        self.info: dict = {}
        self.account = f"bench{secrets.token_hex(4)}"
        self.auth: dict[str, str] = {}
        src = original_server.checkout(cfg)
        if not src:
            self.info = {
                "status": "skipped",
                "reason": "no original CassieQ checkout given "
                f"(--original-src or {original_server.ORIGINAL_ENV})",
            }
            return
        try:
            runtime = original_server.prepare(src)
            self.info = {
                "status": "ok",
                **{k: v for k, v in runtime.items() if k not in ("class_path", "schema")},
            }
            self.server = original_server.OriginalServer(
                cfg, runtime, tmp, f"{cfg.keyspace}_original"
            )
            keys = self.server.create_account(self.account)
            self.auth = {"Authorization": f"Key {keys['primary']}"}
            # untimed: the JVM compiles its hot paths in the first few hundred requests
            original_run(self.server, self.auth, self.account, WARM_UP)
        except (SuiteUnavailable, RuntimeError, OSError, AssertionError) as exc:
            self.stop()
            self.info = {"status": "skipped", "reason": f"{src}: {exc}"}
            log.warning("service: the original server is not measured: %s", exc)

    def measure(self, size) -> None:
        if self.server is None:
            return
        try:
            r = original_run(self.server, self.auth, self.account, size)
        except Exception as exc:  # recorded; our own figures stand
            tail = self.server.log_tail()
            self.info = {**self.info, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
            log.warning("service: the original server failed: %s\n%s", exc, tail)
            self.stop()
            return
        log.info(
            "service, original server: put %.0f, get+ack %.0f msg/s",
            r["put"]["rate"],
            r["get_ack"]["rate"],
        )
        self.runs.append(r)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def result(self) -> dict:
        out = dict(self.info)
        if out.get("status") == "ok" and not self.runs:
            out = {**out, "status": "failed", "reason": "no run finished"}
        for path in ("put", "get_ack") if self.runs else ():
            out[path] = {
                "rate": summarize([r[path]["rate"] for r in self.runs]),
                "p50_ms": summarize([r[path]["p50_ms"] for r in self.runs]),
                "p99_ms": summarize([r[path]["p99_ms"] for r in self.runs]),
                "messages": [r[path]["messages"] for r in self.runs],
            }
        return out


# The service's goals against the original (issue 27), per instance:
# (our path, the original's path, the least ratio)
GOALS = (("put", "put", 2.0), ("get_ack", "get_ack", 2.0), ("batch", "get_ack", 10.0))


def against_original(ours: dict, original: dict) -> dict:
    """Each goal's ratio: ours per instance (with 1 instance; with 2, each instance's share
    beside it) over the original's median msg/s (one instance), and whether it is met."""
    out = {}
    for mine, theirs, goal in GOALS:
        base = original[theirs]["rate"]["median"]
        if not base:
            continue
        one = ours["1"][mine]["rate_per_instance"]["median"] / base
        two = ours["2"][mine]["rate_per_instance"]["median"] / base
        out[f"{mine}_vs_{theirs}"] = {
            "goal": goal,
            "ratio_1_instance": one,
            "ratio_2_instances": two,
            "met": one >= goal,
        }
    return out


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
        original = Baseline(cfg, tmp)
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
                # the original right after ours, on the same Cassandra, same threads and sizes
                original.measure(size)
        finally:
            original.stop()
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
    out["original"] = original.result()
    if out["original"]["status"] == "ok":
        out["vs_original"] = against_original(out["instances"], out["original"])
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
    ]
    orig = entry["original"]
    if orig["status"] != "ok":
        return [*lines, f"Original CassieQ server: {orig['status']}: {orig.get('reason', '')}"]
    lines += [
        "",
        f"Original CassieQ server, same run, 1 instance ({orig['jar']}, {orig['java']}; "
        "same client threads and sizes, right after ours in each repeat):",
        "",
        "| path | msg/s (min-max) | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for path in ("put", "get_ack"):
        r = orig[path]
        lines.append(
            f"| {names[path]} | {r['rate']['median']:,.0f} "
            f"({r['rate']['min']:,.0f}-{r['rate']['max']:,.0f}) | "
            f"{r['p50_ms']['median']:.1f} | {r['p99_ms']['median']:.1f} |"
        )
    lines += ["", "| goal (per instance) | ours / original, 1 instance | 2 instances | met |"]
    lines.append("|---|---:|---:|---|")
    for key, g in entry.get("vs_original", {}).items():
        mine, theirs = key.split("_vs_")
        lines.append(
            f"| {names[mine]} >= {g['goal']:.0f}x the original's {names[theirs]} | "
            f"{g['ratio_1_instance']:.2f}x | {g['ratio_2_instances']:.2f}x | "
            f"{'yes' if g['met'] else 'no'} |"
        )
    return lines
