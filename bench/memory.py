"""Suite 6: peak resident memory of the driver, the JVM and the Python workers, read from /proc.

A sampler thread walks this process's descendants (the JVM that PySpark starts, and the Python
daemon and workers the JVM forks) a few times a second. Each process's ``VmHWM`` is the kernel's
own peak RSS for its life, so short spikes between samples are not missed; the sum over workers
is sampled, so it is a lower bound on the true peak of the sum.
"""

from __future__ import annotations

import os
import threading


def status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: parse after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root: int) -> list[int]:
    kids = _children_map()
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def classify(pid: int) -> str:
    cmd = cmdline(pid)
    if "java" in cmd.split(" ")[0] or "org.apache.spark" in cmd:
        return "jvm"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd or "python" in cmd:
        return "python_worker"
    return "other"


# Processes of the run that are not the measured Spark's (the scc suite's PySpark 3.5 job and its
# JVM, up during the sink and source suites): left out with everything under them.
EXCLUDED_ROOTS: set[int] = set()


class MemorySampler:
    """``with MemorySampler() as m: ...``; then ``m.report()`` (MiB)."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.root = os.getpid()
        self.peaks: dict[int, tuple[str, int]] = {}
        self.max_worker_sum_kb = 0
        self.max_workers = 0
        self.driver_max_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="mem-sampler")

    def __enter__(self) -> MemorySampler:
        self.driver_start_kb = status_kb(self.root, "VmRSS") or 0
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()

    def _sample(self) -> None:
        self.driver_max_kb = max(self.driver_max_kb, status_kb(self.root, "VmRSS") or 0)
        worker_sum, workers = 0, 0
        left_out = set(EXCLUDED_ROOTS)
        for root in EXCLUDED_ROOTS:
            left_out.update(descendants(root))
        for pid in descendants(self.root):
            if pid in left_out:
                continue
            kind = self.peaks[pid][0] if pid in self.peaks else classify(pid)
            rss = status_kb(pid, "VmRSS")
            hwm = status_kb(pid, "VmHWM")
            if rss is None:
                continue
            prev = self.peaks.get(pid, (kind, 0))[1]
            self.peaks[pid] = (kind, max(prev, hwm or rss))
            if kind == "python_worker":
                worker_sum += rss
                workers += 1
        self.max_worker_sum_kb = max(self.max_worker_sum_kb, worker_sum)
        self.max_workers = max(self.max_workers, workers)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except Exception:  # a process vanished mid-read; the next sample will do
                continue

    def report(self) -> dict:
        def mib(kb: float) -> float:
            return round(kb / 1024.0, 1)

        workers = [kb for kind, kb in self.peaks.values() if kind == "python_worker"]
        jvm = [kb for kind, kb in self.peaks.values() if kind == "jvm"]
        return {
            "driver_python_rss_mib": mib(self.driver_max_kb),
            "driver_python_hwm_mib": mib(status_kb(self.root, "VmHWM") or 0),
            "jvm_peak_mib": mib(max(jvm)) if jvm else None,
            "python_workers_seen": len(workers),
            "python_worker_peak_mib": mib(max(workers)) if workers else None,
            "python_workers_concurrent_max": self.max_workers,
            "python_workers_sum_peak_mib": mib(self.max_worker_sum_kb),
        }
