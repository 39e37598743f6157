"""Profile of the client's single-message and batch paths against the reference protocol.

For ``put``, ``get``, ``ack``, ``get_many(100)``, ``ack_many(100)`` and the reference design's
``put``, ``get`` and ``ack`` (``bench/engine.py``'s minimal emulation, one Paxos round per id,
per get, per ack), every statement the client sends is timed from its send to its reply
(``TimingSession``, on ``bench/engine.py``'s counting proxy). Per call the report gives:

- statements, Paxos rounds (statements with ``IF``);
- sequential round trips: groups of statements in flight together (a round trip that waits
  for the previous one's reply starts a new group);
- ms per call in all, ms with at least one statement in flight ("on the wire": Cassandra's
  work and the network), ms in Paxos rounds, and the rest (the client's and the driver's
  Python between replies);
- the statements of the path, their count and mean latency.

Every path is checked: each get returns a message, each ack applies.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

from cassieq_spark import QueueClient
from cassieq_spark.engine.store.session import EncodedStatements

from .common import BenchConfig
from .engine import LWT_CONDITION, CountingSession, Reference, receipt_of, statement_text

PAYLOAD = b"x" * 100
BATCH = 100


class TimingSession(CountingSession):
    """Counts like ``CountingSession`` and times each statement from send to reply."""

    def __init__(self, session):
        super().__init__(session)
        self.spans: list[tuple[float, float, str, bool]] = []  # start, end, cql, lwt

    def _span(self, start: float, statement) -> None:
        text = _label(statement, getattr(self._session.cluster, "_prepared_statements", {}))
        lwt = bool(LWT_CONDITION.search(text)) and not text.lstrip().upper().startswith("CREATE")
        with self._lock:
            self.spans.append((start, time.perf_counter(), text, lwt))

    def execute(self, statement, *a, **kw):
        t0 = time.perf_counter()
        try:
            return super().execute(statement, *a, **kw)
        finally:
            self._span(t0, statement)

    def execute_async(self, statement, *a, **kw):
        t0 = time.perf_counter()
        fut = super().execute_async(statement, *a, **kw)
        done = threading.Event()

        def finished(*_):
            if not done.is_set():
                done.set()
                self._span(t0, statement)

        fut.add_callbacks(finished, finished)
        return fut

    def take(self) -> list[tuple[float, float, str, bool]]:
        with self._lock:
            out, self.spans = self.spans, []
        return out


def _label(statement, prepared: dict) -> str:
    """The statement's CQL; for a batch, its size and the CQL of its first member (found by
    its prepared id in the driver's cache)."""
    inner = getattr(statement, "_statements_and_parameters", None)
    if inner is None:
        return statement_text(statement)
    named = getattr(statement, "query_string", None)
    first = ""
    if isinstance(inner, EncodedStatements):
        first = inner.query
    elif inner:
        is_prepared, member = inner[0][0], inner[0][1]
        if not is_prepared:
            first = str(member)
        elif member in prepared:
            first = prepared[member].query_string
    conditional = (
        " (conditional)" if LWT_CONDITION.search(statement_text(statement) + first) else ""
    )
    return f"BATCH of {len(inner)}{conditional}: {named or first or 'prepared statements'}"


def _union(spans) -> tuple[float, int]:
    """Seconds with at least one statement in flight, and the number of sequential groups."""
    total, groups, end = 0.0, 0, None
    for s, e, _, _ in sorted(spans):
        if end is None or s > end:
            groups += 1
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total, groups


def _short(cql: str) -> str:
    text = " ".join(cql.split())
    return text if len(text) <= 90 else text[:87] + "..."


def measure(
    name: str, session: TimingSession, calls: int, msgs: int, fn: Callable[[], object]
) -> dict:
    time.sleep(0.2)  # replies of an earlier path's async statements
    session.take()
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    time.sleep(0.05)
    spans = session.take()
    wire, groups = _union(spans)
    lwt_s = sum(e - s for s, e, _, lwt in spans if lwt)
    by_cql: dict[str, list[float]] = defaultdict(list)
    for s, e, cql, _ in spans:
        by_cql[_short(cql)].append(e - s)
    return {
        "path": name,
        "calls": calls,
        "messages": msgs,
        "msg_per_s": msgs / seconds,
        "ms_per_call": 1000 * seconds / calls,
        "statements": len(spans) / calls,
        "lwt": sum(1 for *_, lwt in spans if lwt) / calls,
        "round_trips": groups / calls,
        "wire_ms": 1000 * wire / calls,
        "lwt_ms": 1000 * lwt_s / calls,
        "python_ms": 1000 * max(0.0, seconds - wire) / calls,
        "statements_by_cql": {
            k: (len(v) / calls, 1000 * sum(v) / len(v)) for k, v in by_cql.items()
        },
    }


def _ours(client: QueueClient, s: TimingSession, n: int) -> list[dict]:
    queue = f"prof_{uuid.uuid4().hex[:10]}"
    client.create_queue(queue, visibility_timeout=300)
    out = [measure("put", s, n, n, lambda: [client.put(queue, PAYLOAD) for _ in range(n)])]
    receipts: list[str] = []
    out.append(
        measure(
            "get", s, n, n, lambda: receipts.extend(receipt_of(client.get(queue)) for _ in range(n))
        )
    )

    def ack_all() -> None:
        if not all(client.ack(queue, r) for r in receipts):
            raise RuntimeError("an ack did not apply")

    out.append(measure("ack", s, n, n, ack_all))
    calls = max(3, n // 20)
    for i in range(0, calls * BATCH, 1000):
        client.put_many(queue, [PAYLOAD] * min(1000, calls * BATCH - i))
    taken: list[str] = []

    def get_many() -> None:
        for _ in range(calls):
            got = client.get_many(queue, BATCH)
            if len(got) != BATCH:
                raise RuntimeError(f"get_many returned {len(got)} messages, expected {BATCH}")
            taken.extend(receipt_of(m) for m in got)

    out.append(measure(f"get_many({BATCH})", s, calls, calls * BATCH, get_many))

    def ack_many() -> None:
        for i in range(0, len(taken), BATCH):
            results = client.ack_many(queue, taken[i : i + BATCH])
            bad = [r for r in results if getattr(r, "status", "ok") != "ok"]
            if bad:
                raise RuntimeError(f"ack_many: {len(bad)} receipts not acked: {bad[:3]}")

    out.append(measure(f"ack_many({BATCH})", s, calls, len(taken), ack_many))
    left = client.stats(queue)
    if int(left.get("backlog") or 0) != 0:
        raise RuntimeError(f"messages left after the paths: {left.get('backlog')}")
    client.delete_queue(queue)
    return out


def _reference(s: TimingSession, keyspace: str, n: int) -> list[dict]:
    ref = Reference(s, keyspace)
    queue = f"ref_{uuid.uuid4().hex[:10]}"
    out = [measure("ref put", s, n, n, lambda: [ref.put(queue, PAYLOAD) for _ in range(n)])]
    got: list[tuple[int, int]] = []

    def get_all() -> None:
        for _ in range(n):
            m = ref.get(queue)
            if m is None:
                raise RuntimeError("the reference queue was empty before n gets")
            got.append(m)

    out.append(measure("ref get", s, n, n, get_all))

    def ack_all() -> None:
        if not all(ref.ack(queue, m, v) for m, v in got):
            raise RuntimeError("a reference ack did not apply")

    out.append(measure("ref ack", s, n, n, ack_all))
    return out


def run(cfg: BenchConfig, n: int) -> str:
    client = QueueClient.connect(cfg.contact_points, cfg.port, keyspace=cfg.keyspace)
    session = TimingSession(client.conn.session)
    client.conn.session = session
    try:
        # Warm up: prepared statements, connections, the JIT of the node.
        warm = f"prof_warm_{uuid.uuid4().hex[:8]}"
        client.create_queue(warm)
        for _ in range(20):
            client.put(warm, PAYLOAD)
        for _ in range(20):
            client.ack(warm, receipt_of(client.get(warm)))
        client.delete_queue(warm)
        rows = _ours(client, session, n) + _reference(session, cfg.keyspace, n)
    finally:
        client.close()
    return report(rows, n)


def report(rows: list[dict], n: int) -> str:
    by = {r["path"]: r for r in rows}
    head = (
        f"{'path':<14} {'msg/s':>8} {'ms/call':>8} {'stmts':>6} {'Paxos':>6} {'RTTs':>5} "
        f"{'wire ms':>8} {'Paxos ms':>9} {'Python ms':>10}"
    )
    lines = [
        f"# client paths: {n} calls of put / get / ack, {by['get_many(100)']['calls']} of "
        "get_many(100) / ack_many(100), and the reference protocol; 100 B payloads, one thread",
        "checked: every get returned a message, every ack and ack_many receipt applied, "
        "backlog 0 after",
        "",
        "per call: statements, Paxos rounds, sequential round trips (RTTs), ms with a statement in "
        "flight (wire), ms in Paxos statements, ms with none in flight (Python)",
        head,
    ]
    for r in rows:
        lines.append(
            f"{r['path']:<14} {r['msg_per_s']:>8,.0f} {r['ms_per_call']:>8.2f} {r['statements']:>6.2f} "
            f"{r['lwt']:>6.2f} {r['round_trips']:>5.2f} {r['wire_ms']:>8.2f} {r['lwt_ms']:>9.2f} "
            f"{r['python_ms']:>10.2f}"
        )
    lines.append("")
    for ours, ref in (("put", "ref put"), ("get", "ref get"), ("ack", "ref ack")):
        a, b = by[ours], by[ref]
        lines.append(
            f"{ours}: {a['msg_per_s'] / b['msg_per_s']:.2f}x the reference; "
            f"{a['ms_per_call']:.2f} ms vs {b['ms_per_call']:.2f} ms a call, "
            f"{a['round_trips']:.2f} vs {b['round_trips']:.2f} round trips, "
            f"{a['lwt']:.2f} vs {b['lwt']:.2f} Paxos rounds ({a['lwt_ms']:.2f} vs {b['lwt_ms']:.2f} ms); "
            f"Paxos {100 * a['lwt_ms'] / a['ms_per_call']:.0f}% of ours, "
            f"wire {100 * a['wire_ms'] / a['ms_per_call']:.0f}%, Python {100 * a['python_ms'] / a['ms_per_call']:.0f}%"
        )
    lines.append("")
    for r in rows:
        lines.append(f"## {r['path']}: statements per call (count, mean ms)")
        for cql, (count, ms) in sorted(
            r["statements_by_cql"].items(), key=lambda kv: -kv[1][0] * kv[1][1]
        ):
            lines.append(f"  {count:6.2f} x {ms:7.2f} ms  {cql}")
        lines.append("")
    return "\n".join(lines)
