"""Reading what ``bench/prof_datasource.py`` recorded: phase timings and cProfile shares.

``shares`` groups a profile's own time (``tottime``) into a few kinds of cost, so that a
report can say "x% waiting on Cassandra's replies, y% in the driver's Python, z% in Arrow":

- ``wait``: blocked in ``_thread.lock.acquire`` / ``threading`` waits (a reply not there yet);
- ``jvm io``: reading from / writing to the JVM's socket (a task's input rows, its output);
- ``driver``: the Cassandra driver's Python (building, sending, decoding requests);
- ``arrow``: pyarrow; ``pyspark``: PySpark's own Python; ``engine``: ``cassieq_spark/engine``;
  ``spark layer``: ``cassieq_spark/spark``; ``other``: the rest (builtins, stdlib).
"""

from __future__ import annotations

import glob
import io
import json
import os
import pstats
from collections import defaultdict
from dataclasses import dataclass, field

KINDS = ("wait", "jvm io", "driver", "arrow", "pyspark", "engine", "spark layer", "other")


@dataclass
class Phases:
    """Every recorded call, by phase."""

    calls: dict[str, list[dict]] = field(default_factory=dict)

    @classmethod
    def load(cls, prof_dir: str) -> Phases:
        out: dict[str, list[dict]] = defaultdict(list)
        path = os.path.join(prof_dir, "phases.jsonl")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        d = json.loads(line)
                        out[d["phase"]].append(d)
        return cls(dict(out))

    def seconds(self, phase: str) -> float:
        return sum(c["seconds"] for c in self.calls.get(phase, []))

    def cpu(self, phase: str, which: str = "cpu_thread") -> float:
        """CPU seconds of the phase's calls (``cpu_thread`` or ``cpu_process``); 0 for
        records made before they were kept."""
        return sum(c.get(which) or 0.0 for c in self.calls.get(phase, []))

    def count(self, phase: str) -> int:
        return len(self.calls.get(phase, []))

    def window(self, phase: str) -> float:
        """Seconds from the first call's start to the last call's end."""
        calls = self.calls.get(phase, [])
        if not calls:
            return 0.0
        return max(c["start"] + c["seconds"] for c in calls) - min(c["start"] for c in calls)

    def by_pid(self, phase: str) -> dict[int, float]:
        out: dict[int, float] = defaultdict(float)
        for c in self.calls.get(phase, []):
            out[c["pid"]] += c["seconds"]
        return dict(out)

    def each(self, phase: str) -> list[float]:
        return [c["seconds"] for c in sorted(self.calls.get(phase, []), key=lambda c: c["start"])]

    def rows(self, phase: str) -> int:
        return sum(c["rows"] or 0 for c in self.calls.get(phase, []))


def kind(key: tuple[str, int, str]) -> str:
    filename, _, func = key
    if "_thread.lock" in func or (filename.endswith("threading.py") and func == "wait"):
        return "wait"
    if "_io." in func or "socket" in func:
        return "jvm io"
    if "/cassandra/" in filename or func.startswith("<method") and "cassandra" in func:
        return "driver"
    if "pyarrow" in filename or "pyarrow" in func:
        return "arrow"
    if "/pyspark/" in filename:
        return "pyspark"
    if "/cassieq_spark/engine/" in filename:
        return "engine"
    if "/cassieq_spark/spark/" in filename:
        return "spark layer"
    return "other"


def stats(prof_dir: str, phase: str) -> pstats.Stats | None:
    files = sorted(glob.glob(os.path.join(prof_dir, f"{phase}-*.prof")))
    if not files:
        return None
    st = pstats.Stats(files[0], stream=io.StringIO())
    for f in files[1:]:
        st.add(f)
    return st


def shares(st: pstats.Stats) -> dict[str, float]:
    """Own time (seconds) per kind of cost, over every function of the profile."""
    out = dict.fromkeys(KINDS, 0.0)
    raw = st.stats  # type: ignore[attr-defined]
    for key, (_cc, _nc, tt, _ct, _callers) in raw.items():
        out[kind(key)] += tt
    return out


def format_shares(sh: dict[str, float]) -> str:
    total = sum(sh.values()) or 1.0
    parts = [f"{k} {v:.3f} s ({100 * v / total:.0f}%)" for k, v in sh.items() if v > 0]
    return f"own time {total:.3f} s: " + ", ".join(parts)


def top(st: pstats.Stats, n: int = 25, sort: str = "tottime") -> str:
    buf = io.StringIO()
    st.stream = buf  # type: ignore[attr-defined]
    st.sort_stats(sort).print_stats(n)
    # pstats names every merged file first: noise in a report
    return "\n".join(ln for ln in buf.getvalue().splitlines() if not ln.rstrip().endswith(".prof"))


def phase_report(prof_dir: str, phase: str, n: int = 20) -> str:
    """Shares and the top functions of one phase's merged profiles ('' when none)."""
    st = stats(prof_dir, phase)
    if st is None:
        return ""
    return (
        f"### {phase}: {format_shares(shares(st))}\n\n"
        f"{top(st, n, 'tottime')}\n{top(st, n, 'cumulative')}\n"
    )
