"""A PNG of a queue's enqueued and acked totals over time, from the samples of a watch.

Drawn on a bare matplotlib ``Figure`` (the Agg canvas) rather than through ``pyplot``: no GUI
backend is chosen, nothing global changes, and it works on a machine without a display.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from .extras import require

require("the stats plot")

from matplotlib.figure import Figure

from .watch import Sample

log = logging.getLogger(__name__)


def enqueued_vs_acked(samples: Sequence[Sample], path: str | Path, title: str = "") -> Path:
    """Write the plot to ``path`` (PNG) and return it; time is seconds since the first sample."""
    if not samples:
        raise ValueError("no stats samples to plot: watch the queue for at least one refresh")
    start = samples[0].at
    seconds = [s.at - start for s in samples]
    enqueued = [int(s.stats.get("enqueued", 0)) for s in samples]
    acked = [int(s.stats.get("acked", 0)) for s in samples]

    fig = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(seconds, enqueued, label="enqueued", color="tab:blue", linewidth=2)
    ax.plot(seconds, acked, label="acked", color="tab:green", linewidth=2)
    # The gap between the lines is what is still in the queue (backlog, in flight, delayed).
    ax.fill_between(seconds, acked, enqueued, color="tab:orange", alpha=0.2, label="not yet acked")
    ax.set_xlabel("seconds since the first sample")
    ax.set_ylabel("messages (totals)")
    ax.set_title(title or f"queue {samples[-1].stats.get('queue', '?')}: enqueued vs acked")
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    log.info("wrote %s (%d samples)", out, len(samples))
    return out
