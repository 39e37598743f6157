"""``cassieq serve --repair``: the repair the original ran inside its server, under a lease.

Two instances run with ``--repair`` on one keyspace of their own. A producer process is
SIGKILLed between reserving an id and writing its message (the engine's
``writes.before_write`` point), so its reservation is abandoned. Readers pass it once it is
older than the queue's repair timeout; the service's repair loop (nothing in the test calls
repair) then counts the id lost. Only the instance that holds the ``repair`` lease runs
passes (``cassieq_repair_lease_held`` / ``cassieq_repair_passes_total`` of each instance's
``/metrics``, sampled repeatedly); when it is SIGKILLed the other takes the lease over once
the lease's TTL has run out and repairs the next abandoned reservation.

System tier (marked ``system``): server processes of its own and a lease TTL of 30 s to wait
out, about a minute.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid

import pytest
from support.service_harness import Server, start_server

from cassieq_spark import QueueClient

pytestmark = pytest.mark.system

REPAIR_TIMEOUT = 2  # seconds: the queue's repairWorkerBucketFinalizeTimeSeconds
LEASE_TTL = 30  # the service's floor for the lease's TTL (4 intervals, at least 30 s)

KILLED_WRITER = """
import os, signal, sys
from cassieq_spark import QueueClient
from cassieq_spark.engine.store import faults

client = QueueClient.from_options(json.loads(sys.argv[1]))
# the id block is reserved; the process dies before its message is written
faults.on("writes.before_write", lambda **_: os.kill(os.getpid(), signal.SIGKILL))
client.put(sys.argv[2], b"never written")
print("the put returned", flush=True)
"""


def kill_a_writer_mid_put(options: dict, queue: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import json\n" + KILLED_WRITER, json.dumps(options), queue],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr


def repair_metrics(server: Server) -> tuple[float, float]:
    """(lease held, passes finished) from the instance's /metrics."""
    text = server.call("GET", "/metrics", headers=server.operator()).body.decode()
    held = re.search(r"^cassieq_repair_lease_held (\S+)$", text, re.M)
    passes = re.search(r"^cassieq_repair_passes_total (\S+)$", text, re.M)
    assert held and passes, text
    return float(held.group(1)), float(passes.group(1))


def wait_for(what: str, predicate, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {seconds:.0f} s")


def test_one_instance_at_a_time_repairs_a_reservation_abandoned_by_a_killed_writer(
    cassandra, keyspace, tmp_path
):
    options = {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": keyspace,
    }
    secret, admin_key = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    repair = ("--repair", "--repair-interval", "1")

    def start(name: str, *extra: str) -> Server:
        return start_server(
            tmp_path / name,
            cassandra.contact_points,
            cassandra.port,
            keyspace,
            secret,
            admin_key,
            *repair,
            *extra,
        )

    servers = {"a": start("a", "--bootstrap")}
    servers["b"] = start("b")
    client = QueueClient.from_options(options)
    try:
        account = f"rep-{uuid.uuid4().hex[:8]}"
        a = servers["a"]
        key = a.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}"}
        base = f"/api/v1/accounts/{account}/queues"
        create = {
            "queueName": "q",
            "bucketSize": 10,
            "repairWorkerBucketFinalizeTimeSeconds": REPAIR_TIMEOUT,
        }
        assert a.call("POST", base, json.dumps(create), auth).status == 201
        queue = f"{account}.q"

        # one holder, the other idle: sampled over a few seconds
        samples = []
        for _ in range(6):
            samples.append({n: repair_metrics(s) for n, s in servers.items()})
            time.sleep(1)
        holders = {n for n, (held, _) in samples[-1].items() if held == 1}
        assert len(holders) == 1, samples
        (holder,) = holders
        (other,) = set(servers) - holders
        assert all(sum(h for h, _ in s.values()) == 1 for s in samples[1:]), samples
        assert samples[-1][holder][1] > samples[0][holder][1], samples  # passes running
        assert all(s[other] == (0.0, 0.0) for s in samples), samples
        row = client.conn.execute(
            "SELECT owner FROM {ks}.service_leases WHERE name = 'repair'"
        ).one()
        assert row is not None and row.owner in servers[holder].log()

        def abandon_and_get_past_it(payload: str, lost_before: int) -> None:
            kill_a_writer_mid_put(options, queue)
            live = servers[other]  # alive throughout
            assert live.call("POST", f"{base}/q/messages", payload, auth).status == 201

            def delivered():
                r = live.call("GET", f"{base}/q/messages/next", headers=auth)
                return r.json() if r.status == 200 else None

            # readers pass the abandoned id once it is older than the repair timeout
            msg = wait_for(f"{payload} delivered", delivered, 30 + 3 * REPAIR_TIMEOUT)
            assert msg["message"] == payload
            receipt = msg["popReceipt"]
            ack = live.call("DELETE", f"{base}/q/messages?popReceipt={receipt}", None, auth)
            assert ack.status == 204
            # the service's repair loop counts the id lost (the test never calls repair)
            wait_for(
                "abandoned id counted lost by the repair loop",
                lambda: client.stats(queue)["lost"] == lost_before + 1,
                LEASE_TTL + 30,
            )

        abandon_and_get_past_it("after the first kill", 0)
        stats = client.stats(queue)
        assert (stats["republished"], stats["backlog"], stats["in_flight"]) == (0, 0, 0)

        # the holder dies without releasing; the other takes over when the TTL runs out
        killed_at = time.monotonic()
        servers[holder].stop(signal.SIGKILL)
        wait_for("lease taken over", lambda: repair_metrics(servers[other])[0] == 1, LEASE_TTL + 30)
        took = time.monotonic() - killed_at
        assert took <= LEASE_TTL + 30
        passes = repair_metrics(servers[other])[1]
        wait_for("passes by the new holder", lambda: repair_metrics(servers[other])[1] > passes, 30)
        assert "repair lease taken" in servers[other].log()

        abandon_and_get_past_it("after the holder died", 1)
        stats = client.stats(queue)
        assert (stats["lost"], stats["republished"], stats["backlog"]) == (2, 0, 0)
        print(f"lease taken over {took:.1f} s after the holder's SIGKILL (TTL {LEASE_TTL} s)")
    finally:
        client.close()
        for s in servers.values():
            s.stop()
