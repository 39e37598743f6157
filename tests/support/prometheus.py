"""A real Prometheus server (Debian's ``prometheus`` package) for the system tier: started on a
free loopback port with a 1 s scrape interval over the targets given, queried through its HTTP
API. Tests that need it skip with one line where the binary is absent (.ci/run installs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.service_harness import LOOPBACK, free_port

PROMETHEUS = shutil.which("prometheus")


class PromQLError(AssertionError):
    """The server refused a query (its error type and text)."""


class Prometheus:
    def __init__(self, port: int, log: Path, process: subprocess.Popen):
        self.port = port
        self.log = log
        self.process = process

    def api(self, path: str, **params: str) -> Any:
        url = f"http://{LOOPBACK}:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:  # 400/422: a bad expression, with its reason
            body = json.load(exc)
        if body.get("status") != "success":
            raise PromQLError(f"{params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        """An instant query's result (a vector's samples; a scalar as one sample)."""
        data = self.api("query", query=promql)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, promql: str, seconds: float = 60, step: str = "5s") -> list[dict]:
        end = time.time()
        return self.api(
            "query_range", query=promql, start=str(end - seconds), end=str(end), step=step
        )["result"]

    def wait(self, ready: Callable[[], bool], seconds: float, what: str) -> None:
        """Poll ``ready`` (connection errors while starting count as not ready)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"{what} within {seconds:g} s; {self.log.read_text()[-2000:]}")


@contextmanager
def prometheus(
    tmp_path: Path, targets: dict[str, str], bearer_files: dict[str, Path] | None = None
) -> Iterator[Prometheus]:
    """A Prometheus scraping each ``job name -> host:port`` every second (path /metrics);
    ``bearer_files``: per job, a file whose text it sends as ``Authorization: Bearer``."""
    assert PROMETHEUS is not None, "no prometheus: apt-get install prometheus"
    files = bearer_files or {}
    jobs = "".join(
        f"  - job_name: {job}\n    metrics_path: /metrics\n"
        + (
            f"    authorization:\n      type: Bearer\n      credentials_file: {files[job]}\n"
            if job in files
            else ""
        )
        + f"    static_configs:\n      - targets: ['{target}']\n"
        for job, target in targets.items()
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + jobs
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={LOOPBACK}:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    try:
        yield Prometheus(port, log, process)
    finally:
        process.terminate()
        process.wait(30)
