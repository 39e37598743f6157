"""A real Prometheus (Debian's ``prometheus`` package) scrapes ``/metrics`` of a running
``cassieq serve`` with the service's metrics key (``--metrics-key-file``, sent as a bearer
token) and its HTTP API answers with the per-queue backlog and oldest-age series
and the request counters by route template.

System tier (marked ``system``): skipped with one line where ``prometheus`` is not installed
(.ci/run installs it for that tier).
"""

from __future__ import annotations

import json
import secrets
import uuid

import pytest
from support.prometheus import PROMETHEUS, prometheus
from support.service_harness import LOOPBACK, start_server_on

pytestmark = pytest.mark.system


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus: apt-get install prometheus")
def test_prometheus_scrapes_the_per_queue_backlog(cassandra, keyspace, tmp_path):
    metrics_key = tmp_path / "metrics-key"
    metrics_key.write_text(secrets.token_urlsafe(32))
    server = start_server_on(
        tmp_path / "server",
        cassandra,
        keyspace,
        "--bootstrap",
        "--metrics-key-file",
        str(metrics_key),
    )
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

        assert server.call("GET", "/metrics").status == 401  # not without the key
        target = {"cassieq": f"{LOOPBACK}:{server.port}"}
        with prometheus(tmp_path, target, {"cassieq": metrics_key}) as prom:

            def series() -> dict[str, float]:
                found = prom.query(f'cassieq_queue_backlog{{queue=~"{account}\\\\..*"}}')
                return {r["metric"]["queue"]: float(r["value"][1]) for r in found}

            prom.wait(lambda: len(series()) >= 2, 60, "both queues' backlog series")
            backlog = series()
            assert backlog == {f"{account}.a": 7.0, f"{account}.b": 1.0}, backlog
            up = prom.query('up{job="cassieq"}')
            assert [float(r["value"][1]) for r in up] == [1.0]
            age = prom.query(f'cassieq_queue_oldest_age_seconds{{queue="{account}.a"}}')
            assert len(age) == 1 and float(age[0]["value"][1]) > 0
            puts = prom.query(
                'sum(cassieq_http_requests_total{route="/api/v1/accounts/{account}/queues/{queue}'
                '/messages",method="POST",status="201"})',
            )
            assert float(puts[0]["value"][1]) == 8.0
    finally:
        server.stop()
