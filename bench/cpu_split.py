"""CPU time of a timed run split by the kind of process that spent it (Linux ``/proc``).

A ratio of two rates says which path is slower, not where its time goes: on this 2-core
machine Cassandra, the Spark JVMs and the Python workers share the same cores, so a path can
be bound by any of them. :class:`CpuSplit` reads every process's user+system CPU time before
and after a run and sums the difference per kind, plus the machine's idle time over the run:
CPU seconds per message of Cassandra against the JVM against Python tell which one a design
change has to shrink.

The kinds come from each process's command line (``kind_of``). A process that started and
ended inside the run is not seen (its CPU is lost to the split, not misattributed): the runs
measured with it keep their processes up (Spark's Python workers are reused).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

KINDS = ("cassandra", "spark_jvm", "python_worker", "bench", "other")
_TICK = os.sysconf("SC_CLK_TCK")


def kind_of(cmdline: str, pid: int, me: int) -> str:
    """The kind of the process with command line ``cmdline`` (NUL-separated as in /proc)."""
    if pid == me:
        return "bench"
    if "org.apache.cassandra" in cmdline or "CassandraDaemon" in cmdline:
        return "cassandra"
    if "java" in cmdline.split("\0", 1)[0]:
        return "spark_jvm"
    if "pyspark" in cmdline and "python" in cmdline:
        return "python_worker"
    if "bench" in cmdline and "python" in cmdline:
        return "bench"
    return "other"


def _cpu_by_pid() -> dict[int, tuple[str, float, str]]:
    me = os.getpid()
    out: dict[int, tuple[str, float, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # utime and stime are fields 14 and 15 of stat; fields[0] here is field 3 (state).
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        out[pid] = (kind_of(cmd, pid, me), cpu, cmd.replace("\0", " ")[-80:])
    return out


def _idle() -> float:
    """Idle CPU seconds of the whole machine since boot (all cores)."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    return (int(first[4]) + int(first[5])) / _TICK  # idle + iowait


class CpuSplit:
    """``with CpuSplit() as s: ...`` then ``s.seconds`` (CPU seconds per kind), ``s.idle``
    (idle core-seconds of the machine) and ``s.wall``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.top: list[tuple[float, int, str, str]] = []  # (seconds, pid, kind, command line)
        self.idle = 0.0
        self.wall = 0.0

    def __enter__(self) -> CpuSplit:
        self._before = _cpu_by_pid()
        self._idle0 = _idle()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._t0
        self.idle = _idle() - self._idle0
        after = _cpu_by_pid()
        seconds = dict.fromkeys(KINDS, 0.0)
        top = []
        for pid, (kind, cpu, cmd) in after.items():
            before = self._before.get(pid)
            spent = cpu - (before[1] if before is not None else 0.0)
            seconds[kind] += spent
            if spent > 0:
                top.append((round(spent, 2), pid, kind, cmd))
        self.top = sorted(top, reverse=True)[:8]
        self.seconds = {k: round(v, 2) for k, v in seconds.items()}

    def per_message_us(self, n: int) -> dict[str, float]:
        """CPU microseconds per message of each kind, the total and the idle share."""
        out = {k: round(v / n * 1e6, 2) for k, v in self.seconds.items()}
        out["total"] = round(sum(self.seconds.values()) / n * 1e6, 2)
        out["idle_share"] = round(self.idle / (self.wall * (os.cpu_count() or 1)), 3)
        return out
