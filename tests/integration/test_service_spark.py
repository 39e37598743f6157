"""Messages put over HTTP are read by the Spark streaming source from the engine queue
``account.queue``, and acked when Spark commits (the HTTP statistics then count none)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from support.service_harness import start_test_server

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class Collector:
    """A foreachBatch sink in this process: the payloads of every batch."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = df.collect()
        with self.lock:
            self.values.extend(bytes(r.value) for r in rows)


def test_http_produced_messages_are_consumed_by_the_spark_source(
    sspark, cassandra, queue_client, cassieq_options, tmp_path
):
    server = start_test_server(
        tmp_path / "service",
        cassandra,
        cassieq_options,
    )
    try:
        name = f"acct-{uuid.uuid4().hex[:10]}"
        key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}"}
        base = f"/api/v1/accounts/{name}/queues"
        assert server.call("POST", base, '{"queueName":"orders"}', auth).status == 201
        sent = [f"order-{i}".encode() for i in range(25)]
        for body in sent:
            assert server.call("POST", base + "/orders/messages", body, auth).status == 201

        collector = Collector()
        query = (
            sspark.readStream.format("cassieq")
            .options(**cassieq_options, queue=f"{name}.orders")
            .load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        assert sorted(collector.values) == sorted(sent)  # each once
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if server.call("GET", base + "/orders/statistics", headers=auth).json()["size"] == 0:
                break
            time.sleep(0.5)
        assert server.call("GET", base + "/orders/statistics", headers=auth).json() == {"size": 0}
        # nothing left; while the stream's lease lasts (seconds after it stops) a get is 409
        nxt = server.call("GET", base + "/orders/messages/next", headers=auth)
        assert nxt.status in (204, 409)
        if nxt.status == 409:
            assert nxt.json()["reason"] == "Conflict" and "query" in nxt.json()["message"]
    finally:
        server.stop()
