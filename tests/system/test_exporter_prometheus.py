"""``cassieq exporter`` scraped by a real Prometheus (Debian's ``prometheus`` package): its
HTTP API answers with the backlog, in-flight count and oldest age of queues the test filled,
and every query of the shipped Grafana dashboard (docs/grafana/cassieq-dashboard.json)
evaluates there without error.

System tier (marked ``system``): skipped with one line where ``prometheus`` is not installed
(.ci/run installs it for that tier).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.prometheus import PROMETHEUS, prometheus
from support.service_harness import LOOPBACK, free_port

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus: apt-get install prometheus"),
]

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "cassieq-dashboard.json"
# Panels whose series come from the exporter's queues: they must have data for the test's queues.
QUEUE_METRIC_PREFIX = "cassieq_queue_"


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel, rows included."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    for panel in board["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
    return out


def as_grafana_would(expr: str, queues: str) -> str:
    """Grafana's variables replaced the way it sends the query (``$queue`` as a regex of the
    selected queues, ``$__rate_interval`` at least four scrape intervals)."""
    return expr.replace("$__rate_interval", "1m").replace("$queue", queues)


def test_prometheus_scrapes_the_exporter_and_the_dashboard_queries_evaluate(
    own_keyspace_client, cassieq_options, tmp_path
):
    client = own_keyspace_client
    client.create_queue("orders")
    client.create_queue("audit")
    client.put_many("orders", [f"o{i}" for i in range(5)])
    client.put("audit", "a0")
    # one in flight (for the whole test, however slow the machine), four waiting
    assert client.get("orders", visibility_timeout=900) is not None
    time.sleep(1.0)  # the oldest message has waited at least this long

    port = free_port()
    env = {
        **os.environ,
        "CASSIEQ_CONTACT_POINTS": cassieq_options["contactPoints"],
        "CASSIEQ_PORT": cassieq_options["port"],
        "CASSIEQ_KEYSPACE": client.config.keyspace,
    }
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cassieq_spark",
            "exporter",
            "--listen-host",
            LOOPBACK,
            "--listen-port",
            str(port),
            "--refresh-seconds",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "exporter.log").open("wb"),
        text=True,
    )
    try:
        assert exporter.stdout is not None
        first = exporter.stdout.readline()
        assert json.loads(first) == {"metrics": f"http://{LOOPBACK}:{port}/metrics"}, (
            first,
            (tmp_path / "exporter.log").read_text(),
        )
        with prometheus(tmp_path, {"cassieq-exporter": f"{LOOPBACK}:{port}"}) as prom:

            def backlog() -> dict[str, float]:
                found = prom.query('cassieq_queue_backlog{job="cassieq-exporter"}')
                return {r["metric"]["queue"]: float(r["value"][1]) for r in found}

            prom.wait(lambda: len(backlog()) == 2, 45, "both queues' backlog series")
            assert backlog() == {"orders": 4.0, "audit": 1.0}
            flight = prom.query('cassieq_queue_in_flight{queue="orders"}')
            assert [float(r["value"][1]) for r in flight] == [1.0]
            age = prom.query('cassieq_queue_oldest_age_seconds{queue="orders"}')
            assert len(age) == 1 and 1.0 <= float(age[0]["value"][1]) < 120, age
            enqueued = prom.query('cassieq_queue_enqueued_total{queue="orders"}')
            assert [float(r["value"][1]) for r in enqueued] == [5.0]
            # rate() needs two samples in its window: wait for a second scrape.
            prom.wait(
                lambda: bool(prom.query("rate(cassieq_queue_enqueued_total[1m])")),
                15,
                "a rate over two scrapes",
            )

            queries = dashboard_queries()
            assert len(queries) >= 15
            failed, empty = [], []
            for title, expr in queries:
                promql = as_grafana_would(expr, "orders|audit")
                try:
                    result = prom.query(promql)
                    prom.query_range(promql, 60, "5s")
                except AssertionError as exc:
                    failed.append(f"{title}: {exc}")
                    continue
                if QUEUE_METRIC_PREFIX in expr and not result:
                    empty.append(f"{title}: {promql}")
            assert not failed, failed
            assert not empty, empty
            # the dashboard's queue variable: label_values(cassieq_queue_backlog, queue)
            names = prom.api("label/queue/values", **{"match[]": "cassieq_queue_backlog"})
            assert {"orders", "audit"} <= set(names)
            # the exporter's own client calls (its stats passes) are counted too
            ops = prom.query('cassieq_client_operations_total{operation="stats",outcome="ok"}')
            assert ops and float(ops[0]["value"][1]) >= 2
    finally:
        exporter.terminate()
        exporter.wait(30)
    assert exporter.returncode == 0, (tmp_path / "exporter.log").read_text()
