"""CPU time of a timed run split by the kind of process that spent it (Linux ``/proc``).

A ratio of two rates says which path is slower, not where its time goes: on this 2-core
machine Cassandra, the Spark JVMs and the Python workers share the same cores, so a path can
be bound by any of them. :class:`CpuSplit` reads every process's user+system CPU time before
and after a run and sums the difference per kind, plus the machine's idle time over the run:
CPU seconds per message of Cassandra against the JVM against Python tell which one a design
change has to shrink.

The kinds come from each process's command line and parentage (``kind_of``): the Spark JVMs
and Python workers counted are the bench process's descendants, the Cassandra node the one
run from this checkout; anything else on the machine (another checkout's nodes, tests) is
``other``. A process that started and ended inside the run is not seen (its CPU is lost to
the split, not misattributed): the runs measured with it keep their processes up (Spark's
Python workers are reused).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

KINDS = ("cassandra", "spark_jvm", "python_worker", "source_runner", "bench", "other")
_TICK = os.sysconf("SC_CLK_TCK")
_ROOT = str(Path(__file__).resolve().parents[1])


def kind_of(cmdline: str, mine: bool, root: str = _ROOT) -> str:
    """The kind of a process with command line ``cmdline`` (NUL-separated as in /proc);
    ``mine``: the bench process or one of its descendants."""
    if "org.apache.cassandra" in cmdline:
        return "cassandra" if root in cmdline else "other"
    if not mine:
        return "other"
    if "java" in cmdline.split("\0", 1)[0]:
        return "spark_jvm"
    if "python_streaming_source_runner" in cmdline:
        return "source_runner"  # the driver's Python of one streaming query: planning, acks
    if "pyspark" in cmdline:
        return "python_worker"
    return "bench"


def _cpu_by_pid() -> dict[int, tuple[str, float, str]]:
    me = os.getpid()
    seen: dict[int, tuple[int, float, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # Fields 4 (ppid), 14 and 15 (utime, stime) of stat; fields[0] here is field 3.
        seen[int(d.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK, cmd)

    def mine(pid: int) -> bool:
        while pid > 1:
            if pid == me:
                return True
            pid = seen[pid][0] if pid in seen else 0
        return False

    return {
        pid: (kind_of(cmd, mine(pid)), cpu, cmd.replace("\0", " ")[-80:])
        for pid, (_, cpu, cmd) in seen.items()
    }


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
