"""The machine and versions a benchmark ran on, recorded beside its figures."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from .common import BenchConfig

ROOT = Path(__file__).resolve().parent.parent


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_info(cfg: BenchConfig) -> dict:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in _read("/proc/cpuinfo").splitlines()
            if "model name" in ln
        ),
        platform.processor(),
    )
    mem_kb = next(
        (
            int(ln.split()[1])
            for ln in _read("/proc/meminfo").splitlines()
            if ln.startswith("MemTotal")
        ),
        0,
    )
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = None
    from cassieq_dev import local_cassandra

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = ""
    host = cfg.contact_points.split(",")[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "pyspark": spark_version,
        "cassandra": local_cassandra.query_release_version(host, cfg.port),
        "cassandra_nodes": "1 local node, same machine",
        "git_commit": commit,
        "load_average_start": list(os.getloadavg()),
    }
