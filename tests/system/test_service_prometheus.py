"""A real Prometheus (Debian's ``prometheus`` package) scrapes ``/metrics`` of a running
``cassieq serve`` and its HTTP API answers with the per-queue backlog and oldest-age series
and the request counters by route template.

System tier (marked ``system``): skipped with one line where ``prometheus`` is not installed
(.ci/run installs it for that tier).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid

import pytest
from support.service_harness import LOOPBACK, free_port, start_server

pytestmark = pytest.mark.system

PROMETHEUS = shutil.which("prometheus")


def query(port: int, promql: str) -> list[dict]:
    url = f"http://{LOOPBACK}:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus: apt-get install prometheus")
def test_prometheus_scrapes_the_per_queue_backlog(cassandra, keyspace, tmp_path):
    server = start_server(
        tmp_path / "server",
        cassandra.contact_points,
        cassandra.port,
        keyspace,
        secrets.token_urlsafe(32),
        secrets.token_urlsafe(24),
        "--bootstrap",
    )
    prom = None
    try:
        account = f"prom-{uuid.uuid4().hex[:6]}"
        key = server.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}"}
        base = f"/api/v1/accounts/{account}/queues"
        for q in ("a", "b"):
            assert server.call("POST", base, json.dumps({"queueName": q}), auth).status == 201
        for i in range(7):
            assert server.call("POST", f"{base}/a/messages", f"m{i}", auth).status == 201
        assert server.call("POST", f"{base}/b/messages", "only", auth).status == 201

        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: cassieq\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['{LOOPBACK}:{server.port}']\n"
        )
        port = free_port()
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={LOOPBACK}:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
        )

        def series() -> dict[str, float]:
            try:
                found = query(port, f'cassieq_queue_backlog{{queue=~"{account}\\\\..*"}}')
            except OSError:  # not listening yet
                return {}
            return {r["metric"]["queue"]: float(r["value"][1]) for r in found}

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(series()) < 2:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.5)
        backlog = series()
        assert backlog == {f"{account}.a": 7.0, f"{account}.b": 1.0}, (
            backlog,
            (tmp_path / "prometheus.log").read_text()[-2000:],
        )
        up = query(port, 'up{job="cassieq"}')
        assert [float(r["value"][1]) for r in up] == [1.0]
        age = query(port, f'cassieq_queue_oldest_age_seconds{{queue="{account}.a"}}')
        assert len(age) == 1 and float(age[0]["value"][1]) > 0
        puts = query(
            port,
            'sum(cassieq_http_requests_total{route="/api/v1/accounts/{account}/queues/{queue}'
            '/messages",method="POST",status="201"})',
        )
        assert float(puts[0]["value"][1]) == 8.0
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        server.stop()
