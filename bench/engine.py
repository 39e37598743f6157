"""Micro-benchmark of the queue engine: put, put_many, get and ack rates, and how many
lightweight transactions (Paxos rounds) and statements each message costs.

Counting: the client's driver session is wrapped in a proxy that counts every statement it
executes (sync or async); a statement is a lightweight transaction when its CQL has a
condition (``IF ...``; conditional batches included). This counts what the client asks for;
a CAS that loses a race still costs its Paxos round and is counted.

For comparison, the reference design's protocol (one LWT per id allocation, one per get, one
per ack) is implemented minimally here, on the same node, in its own tables, and measured the
same way.

    .venv/bin/python -m bench.engine [--messages 2000] [--contact-points 127.0.0.1]

Writes bench/results/engine-<date>.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import threading
import time
import uuid
from pathlib import Path
from typing import TypeVar

from cassieq_spark import QueueClient
from cassieq_spark.engine.core.messages import Message
from cassieq_spark.engine.store.session import EncodedStatements

T = TypeVar("T")

KEYSPACE = "cassieq_bench"
LWT_CONDITION = re.compile(r"\bIF\s", re.IGNORECASE)


def _some(value: T | None) -> T:
    """A benchmark that got nothing did not do the work it reports: stop it."""
    if value is None:
        raise RuntimeError("the queue was empty before n messages were taken")
    return value


def receipt_of(message: Message | None) -> str:
    return _some(_some(message).pop_receipt)


def statement_text(statement) -> str:
    if isinstance(statement, str):
        return statement
    prepared = getattr(statement, "prepared_statement", None)
    if prepared is not None:
        return prepared.query_string
    inner = getattr(statement, "_statements_and_parameters", None)
    if isinstance(inner, EncodedStatements):  # plain inserts, encoded by the write path
        return inner.query
    if inner is not None:  # a BatchStatement: conditional if any member is
        return " ".join(statement_text(s) if not isinstance(s, tuple) else str(s[1]) for s in inner)
    return getattr(statement, "query_string", "")


class CountingSession:
    """Proxy of a driver Session that counts statements and lightweight transactions."""

    def __init__(self, session):
        self._session = session
        self._lock = threading.Lock()
        self.statements = 0
        self.lwt = 0

    def _count(self, statement) -> None:
        text = statement_text(statement)
        with self._lock:
            self.statements += 1
            if not text.lstrip().upper().startswith("CREATE") and LWT_CONDITION.search(text):
                self.lwt += 1

    def execute(self, statement, *a, **kw):
        self._count(statement)
        return self._session.execute(statement, *a, **kw)

    def execute_async(self, statement, *a, **kw):
        self._count(statement)
        return self._session.execute_async(statement, *a, **kw)

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.statements, self.lwt

    def __getattr__(self, name):
        return getattr(self._session, name)


def _measure(name: str, counter: CountingSession, messages: int, fn) -> dict:
    s0, l0 = counter.snapshot()
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    s1, l1 = counter.snapshot()
    return {
        "operation": name,
        "messages": messages,
        "seconds": round(seconds, 3),
        "per_second": round(messages / seconds, 1),
        "statements_per_message": round((s1 - s0) / messages, 3),
        "lwt_per_message": round((l1 - l0) / messages, 3),
    }


GET_MANY = 100  # messages per get_many / ack_many call


def bench_cassieq(client: QueueClient, counter: CountingSession, n: int, batch: int) -> list[dict]:
    queue = f"bench_{uuid.uuid4().hex[:10]}"
    client.create_queue(queue, visibility_timeout=300)
    payload = b"x" * 100
    out = [
        _measure("put", counter, n, lambda: [client.put(queue, payload) for _ in range(n)]),
        _measure(
            f"put_many({batch})",
            counter,
            n * 5,
            lambda: [client.put_many(queue, [payload] * batch) for _ in range(n * 5 // batch)],
        ),
    ]
    receipts: list[str] = []
    out.append(
        _measure(
            "get",
            counter,
            n,
            lambda: receipts.extend(receipt_of(client.get(queue)) for _ in range(n)),
        )
    )
    out.append(_measure("ack", counter, n, lambda: [client.ack(queue, r) for r in receipts]))
    # The batch forms on the put_many messages still queued (n * 5), 100 per call.
    calls = max(1, n // GET_MANY)
    taken: list[str] = []

    def get_many() -> None:
        for _ in range(calls):
            taken.extend(receipt_of(m) for m in client.get_many(queue, GET_MANY))

    out.append(_measure(f"get_many({GET_MANY})", counter, calls * GET_MANY, get_many))
    out.append(
        _measure(
            f"ack_many({GET_MANY})",
            counter,
            len(taken),
            lambda: [
                client.ack_many(queue, taken[i : i + GET_MANY])
                for i in range(0, len(taken), GET_MANY)
            ],
        )
    )
    client.delete_queue(queue)
    return out


# -- the reference design's protocol, minimally --------------------------------------------

_REF_TABLES = [
    "CREATE TABLE IF NOT EXISTS {ks}.ref_monoton (queue text PRIMARY KEY, value bigint)",
    "CREATE TABLE IF NOT EXISTS {ks}.ref_messages (queue text, bucket bigint, id bigint, "
    "payload blob, version int, acked boolean, PRIMARY KEY ((queue, bucket), id))",
]
REF_BUCKET = 20


class Reference:
    """One LWT to take each id, one to claim each message, one to ack it (as the reference)."""

    def __init__(self, session: CountingSession, keyspace: str):
        self.s = session
        for ddl in _REF_TABLES:
            session.execute(ddl.format(ks=keyspace), timeout=60)
        p = session.prepare
        self.read_next = p(f"SELECT value FROM {keyspace}.ref_monoton WHERE queue = ?")
        self.init = p(
            f"INSERT INTO {keyspace}.ref_monoton (queue, value) VALUES (?, 0) IF NOT EXISTS"
        )
        self.bump = p(f"UPDATE {keyspace}.ref_monoton SET value = ? WHERE queue = ? IF value = ?")
        self.insert = p(
            f"INSERT INTO {keyspace}.ref_messages (queue, bucket, id, payload, version) "
            "VALUES (?, ?, ?, ?, 0)"
        )
        self.scan = p(
            f"SELECT id, version, acked FROM {keyspace}.ref_messages WHERE queue = ? AND bucket = ?"
        )
        self.claim = p(
            f"UPDATE {keyspace}.ref_messages SET version = ? WHERE queue = ? AND bucket = ? "
            "AND id = ? IF version = ?"
        )
        self.ack_stmt = p(
            f"UPDATE {keyspace}.ref_messages SET acked = true WHERE queue = ? AND bucket = ? "
            "AND id = ? IF version = ?"
        )
        self.reader = 0

    def put(self, queue: str, payload: bytes) -> int:
        while True:
            row = self.s.execute(self.read_next, (queue,)).one()
            if row is None:
                self.s.execute(self.init, (queue,))
                continue
            if self.s.execute(self.bump, (row.value + 1, queue, row.value)).was_applied:
                mid = row.value
                self.s.execute(self.insert, (queue, mid // REF_BUCKET, mid, payload))
                return mid

    def get(self, queue: str) -> tuple[int, int] | None:
        while True:
            bucket = self.reader // REF_BUCKET
            rows = [r for r in self.s.execute(self.scan, (queue, bucket)) if r.id >= self.reader]
            for r in rows:
                claimable = r.version == 0 and not r.acked
                if (
                    claimable
                    and self.s.execute(self.claim, (1, queue, bucket, r.id, 0)).was_applied
                ):
                    self.reader = r.id + 1
                    return r.id, 1
            if not rows:
                return None
            self.reader = (bucket + 1) * REF_BUCKET

    def ack(self, queue: str, mid: int, version: int) -> bool:
        return self.s.execute(self.ack_stmt, (queue, mid // REF_BUCKET, mid, version)).was_applied


def bench_reference(counter: CountingSession, keyspace: str, n: int) -> list[dict]:
    ref = Reference(counter, keyspace)
    queue = f"ref_{uuid.uuid4().hex[:10]}"
    payload = b"x" * 100
    out = [_measure("put", counter, n, lambda: [ref.put(queue, payload) for _ in range(n)])]
    got: list[tuple[int, int]] = []
    out.append(
        _measure("get", counter, n, lambda: got.extend(_some(ref.get(queue)) for _ in range(n)))
    )
    out.append(_measure("ack", counter, n, lambda: [ref.ack(queue, m, v) for m, v in got]))
    return out


def median_runs(runs: list[list[dict]]) -> list[dict]:
    """One row per operation from repeated runs: the run with the median rate, plus min/max.

    Every run measures the same operations in the same order; the row kept is the whole
    median run's (its statement and LWT counts belong to that rate), with ``min``, ``max`` and
    ``values`` of the rate over all runs. A single-shot ratio of two runs on a shared machine
    swings twofold; the median of interleaved runs is what the report compares.
    """
    out = []
    for rows in zip(*runs, strict=True):
        ops = {r["operation"] for r in rows}
        if len(ops) != 1:
            raise ValueError(f"runs measured different operations in one place: {sorted(ops)}")
        ranked = sorted(rows, key=lambda r: r["per_second"])
        values = [r["per_second"] for r in rows]
        out.append(
            {
                **ranked[(len(ranked) - 1) // 2],
                "min": min(values),
                "max": max(values),
                "values": values,
                "runs": len(values),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2000, help="messages per single-op test")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--contact-points", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9042)
    ap.add_argument("--keyspace", default=KEYSPACE)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each design, interleaved (ours, reference, ours, ...); figures are medians",
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: must be at least 1")

    client = QueueClient.connect(args.contact_points, args.port, keyspace=args.keyspace)
    client.bootstrap(create_keyspace=True)
    counter = CountingSession(client.conn.session)
    client.conn.session = counter
    ours_runs: list[list[dict]] = []
    ref_runs: list[list[dict]] = []
    try:
        for _ in range(args.repeats):
            ours_runs.append(bench_cassieq(client, counter, args.messages, args.batch))
            ref_runs.append(bench_reference(counter, args.keyspace, args.messages))
    finally:
        client.close()
    ours = median_runs(ours_runs)
    ref = median_runs(ref_runs)
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"python": platform.python_version(), "machine": platform.machine()},
        "messages": args.messages,
        "repeats": args.repeats,
        "payload_bytes": 100,
        "lwt_counting": "client-side: statements whose CQL carries an IF condition",
        "cassieq": ours,
        "reference_protocol": ref,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"engine-{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'design':<10} {'operation':<16} {'msg/s':>9} {'stmts/msg':>10} {'LWT/msg':>8}")
    for design, rows in (("cassieq", ours), ("reference", ref)):
        for r in rows:
            print(
                f"{design:<10} {r['operation']:<16} {r['per_second']:>9.1f} "
                f"{r['statements_per_message']:>10.3f} {r['lwt_per_message']:>8.3f}"
            )
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
