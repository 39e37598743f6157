"""``cassieq serve`` stays responsive under scrapes and long polls: while 64 clients scrape
``/metrics`` in a loop and 40 clients long-poll an empty queue (v2, ``waitSeconds=20``), puts
to another queue keep completing, one after another, each well within a generous bound, and
every scrape and poll is answered.

The bound (10 s a put) is far above a put's latency on an idle instance and far below what a
put waits when scrapes or polls hold the engine threads (the length of a poll, 20 s, or for
ever). System tier (marked ``system``): one server of its own, about 30 s.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.service_harness import start_server_on

pytestmark = pytest.mark.system

SCRAPERS = 64
POLLERS = 40
PUTS = 20
PUT_BOUND = 10.0  # seconds, generous


def test_puts_complete_while_64_scrapes_and_40_long_polls_run(cassandra, keyspace, tmp_path):
    server = start_server_on(
        tmp_path / "server",
        cassandra,
        keyspace,
        "--bootstrap",
        "--stats-seconds",
        "1",  # a stats pass every second: scrapes always meet a refresh
    )
    try:
        account = f"busy-{uuid.uuid4().hex[:6]}"
        key = server.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}", "Content-Type": "application/json"}
        base = f"/api/v1/accounts/{account}/queues"
        for q in ("empty", "work"):
            assert server.call("POST", base, json.dumps({"queueName": q}), auth).status == 201
        stop = threading.Event()
        scrapes: list[int] = []
        polls: list[int] = []
        poll = f"/api/v2/accounts/{account}/queues/empty/messages?waitSeconds=20"

        def scrape() -> None:
            while not stop.is_set():
                scrapes.append(
                    server.call("GET", "/metrics", headers=server.operator(), timeout=60).status
                )

        def long_poll() -> None:
            while not stop.is_set():
                polls.append(server.call("GET", poll, headers=auth, timeout=60).status)

        took: list[float] = []
        with ThreadPoolExecutor(SCRAPERS + POLLERS) as pool:
            futures = [pool.submit(scrape) for _ in range(SCRAPERS)]
            futures += [pool.submit(long_poll) for _ in range(POLLERS)]
            try:
                time.sleep(2)  # every poll waiting, scrapes under way
                for i in range(PUTS):
                    started = time.monotonic()
                    r = server.call("POST", f"{base}/work/messages", f"m{i}", auth, timeout=60)
                    took.append(time.monotonic() - started)
                    assert r.status == 201, (r.status, r.body)
                    assert took[-1] < PUT_BOUND, took
            finally:
                stop.set()
            for f in futures:
                f.result()
        assert scrapes and set(scrapes) == {200}, set(scrapes)
        assert polls and set(polls) == {200}, set(polls)
        print(
            f"{PUTS} puts: max {max(took):.2f} s, median {sorted(took)[PUTS // 2]:.3f} s; "
            f"{len(scrapes)} scrapes, {len(polls)} polls answered"
        )
    finally:
        server.stop()
