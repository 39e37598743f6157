"""A streaming query's micro-batch cost split by Spark's own ``durationMs`` fields.

``StreamingQueryProgress.durationMs`` has, per trigger: ``latestOffset`` (the source's
planning call), ``queryPlanning``, ``getBatch``, ``addBatch`` (the batch's job: read and
write), ``walCommit`` (offset log), ``commitOffsets`` (commit log and the source's
``commit``), and ``triggerExecution`` (the whole trigger).
"""

from __future__ import annotations

from collections.abc import Sequence

KEYS = (
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "walCommit",
    "commitOffsets",
    "triggerExecution",
)


def split(progress: Sequence[dict], with_rows: bool | None = True) -> dict:
    """Sum and mean per field over the triggers (only those with rows when ``with_rows`` is
    True, only empty ones when False, all when None); shares of ``triggerExecution``."""
    picked = [
        p for p in progress if with_rows is None or (p.get("numInputRows", 0) > 0) == with_rows
    ]
    n = len(picked)
    sums = {k: sum(p["durationMs"].get(k, 0) for p in picked) / 1000.0 for k in KEYS}
    total = sums["triggerExecution"] or 1.0
    named = sum(v for k, v in sums.items() if k != "triggerExecution")
    return {
        "triggers": n,
        "rows": sum(p.get("numInputRows", 0) for p in picked),
        "seconds": sums,
        "mean_ms": {k: (1000.0 * v / n if n else 0.0) for k, v in sums.items()},
        "share": {k: v / total for k, v in sums.items() if k != "triggerExecution"},
        "unnamed_share": max(0.0, 1.0 - named / total),
    }


def format_split(title: str, s: dict) -> str:
    lines = [f"{title}: {s['triggers']} triggers, {s['rows']:,} rows"]
    lines.append(f"  {'field':<16} {'sum s':>8} {'mean ms':>9} {'share':>7}")
    for k in KEYS:
        share = s["share"].get(k)
        sh = f"{100 * share:6.1f}%" if share is not None else "   100%"
        lines.append(f"  {k:<16} {s['seconds'][k]:>8.3f} {s['mean_ms'][k]:>9.1f} {sh:>7}")
    lines.append(
        f"  (rest of triggerExecution, outside the named fields: {100 * s['unnamed_share']:.1f}%)"
    )
    return "\n".join(lines)
