"""Concurrent single puts over HTTP to one queue: each stored once, written in shared batches."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from support.service_harness import metric, start_test_server

JSON = {"Content-Type": "application/json"}
THREADS = 16
PUTS_PER_THREAD = 25


def test_concurrent_puts_are_each_stored_once_in_fewer_writes(
    cassandra, queue_client, cassieq_options, tmp_path
):
    server = start_test_server(
        tmp_path,
        cassandra,
        cassieq_options,
    )
    try:
        account = f"acct-{uuid.uuid4().hex[:10]}"
        key = server.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}", **JSON}
        base = f"/api/v1/accounts/{account}/queues"
        assert server.call("POST", base, json.dumps({"queueName": "q"}), auth).status == 201

        def put_all(worker: int) -> list[int]:
            return [
                server.call("POST", f"{base}/q/messages", f"w{worker}-{i}", auth).status
                for i in range(PUTS_PER_THREAD)
            ]

        with ThreadPoolExecutor(THREADS) as pool:
            statuses = [s for batch in pool.map(put_all, range(THREADS)) for s in batch]
        assert Counter(statuses) == {201: THREADS * PUTS_PER_THREAD}

        stored = Counter()
        while batch := queue_client.get_many(f"{account}.q", 100, visibility_timeout=60):
            stored.update(m.payload.decode() for m in batch)
            queue_client.ack_many(f"{account}.q", [m.pop_receipt for m in batch])
        expected = {f"w{w}-{i}" for w in range(THREADS) for i in range(PUTS_PER_THREAD)}
        assert set(stored) == expected and set(stored.values()) == {1}

        writes = metric(
            server.call("GET", "/metrics", headers=server.operator()).body.decode(),
            "cassieq_put_writes_total",
        )
        # Puts that arrived while a write was in flight shared the next one.
        assert 1 <= writes < THREADS * PUTS_PER_THREAD, writes
    finally:
        server.stop()
