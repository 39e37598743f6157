"""The run's PNG plots: throughput against each baseline, and the latency CDF."""

from __future__ import annotations

from pathlib import Path


def plots(results: dict, out_dir: Path, stamp: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    s = results["suites"]
    groups = []  # (title, [(label, summary)])
    for size, r in (s.get("sink", {}).get("sizes") or {}).items():
        groups.append(
            (
                f"sink, {size} B",
                [("cassieq sink", r["sink_rate"]), ("raw driver", r["driver_rate"])],
            )
        )
    if s.get("source", {}).get("status") == "ok":
        r = s["source"]
        groups.append(
            ("consume", [("cassieq source", r["source_rate"]), ("driver scan", r["scan_rate"])])
        )
    for name in ("flatness_source", "flatness_client"):
        if s.get(name, {}).get("status") == "ok":
            r = s[name]
            groups.append(
                (name.replace("_", " "), [("old queue", r["old_rate"]), ("fresh", r["fresh_rate"])])
            )
    if groups:
        fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.6), squeeze=False)
        for ax, (title, bars) in zip(axes[0], groups, strict=True):
            med = [b[1]["median"] for b in bars]
            lo = [b[1]["median"] - b[1]["min"] for b in bars]
            hi = [b[1]["max"] - b[1]["median"] for b in bars]
            ax.bar(
                [b[0] for b in bars], med, yerr=[lo, hi], capsize=4, color=["tab:blue", "tab:gray"]
            )
            ax.set_title(title, fontsize=10)
            ax.set_ylabel("messages/s")
            ax.tick_params(axis="x", labelsize=8)
        fig.suptitle(f"throughput, median and min-max ({stamp})", fontsize=10)
        fig.tight_layout()
        name = f"{stamp}-throughput.png"
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        made.append(name)
    trig = s.get("latency", {}).get("triggers") or {}
    if trig:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for t, r in trig.items():
            vals = r["samples"]
            if vals:
                ax.plot(
                    vals, [(i + 1) / len(vals) for i in range(len(vals))], label=f"trigger {t} s"
                )
        ax.set_xlabel("put -> delivery (s)")
        ax.set_ylabel("fraction of messages")
        ax.set_title(f"end-to-end latency CDF ({stamp})", fontsize=10)
        ax.legend()
        fig.tight_layout()
        name = f"{stamp}-latency.png"
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        made.append(name)
    return made
