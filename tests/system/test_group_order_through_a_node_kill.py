"""Message groups on 3 nodes (RF 3) through a node SIGKILLed and restarted, counted from the
consumers' logs (tests/support/groups_run.py): three consumer processes on 100 groups, one of
them with every compare-and-set's reply lost, every 17th message left to its visibility
timeout, node 3 killed while they run and restarted 15 s later. For every group, delivery order
equals id order and no two deliveries of one group overlap; every message is acked once; no
call of the client API raised (a consumer that raises exits non-zero).
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid

import pytest
from support import groups_run
from support.cluster_faults import Faults

from cassieq_spark.client import QueueClient

pytestmark = [pytest.mark.cluster]

GROUPS = 100
PER_GROUP = 6
VT = 3.0


def _delivered(paths) -> int:
    return sum(p.read_text().count('["D",') if p.exists() else 0 for p in paths)


def test_groups_stay_ordered_and_exclusive_through_a_node_kill(cluster3: Faults, tmp_path) -> None:
    options = cluster3.client_options("cassieq_cluster_groups")
    with QueueClient.from_options(options) as admin:
        dc = next(iter(admin.conn.cluster.metadata.all_hosts())).datacenter
        admin.bootstrap(
            create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 3}
        )
        queue = f"g_{uuid.uuid4().hex[:8]}"
        admin.create_queue(queue, visibility_timeout=VT, bucket_size=200, max_delivery_count=50)
        groups_of = groups_run.fill(admin, queue, GROUPS, PER_GROUP, seed=11)

        logs = [tmp_path / f"consumer-{i}.log" for i in range(3)]
        restarted = tmp_path / "node-3-restarted"
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(
                target=groups_run.consume,
                args=(options, queue, who, str(logs[who]), VT),
                # Idle for 12 s ends a consumer only once the node is back (the file below).
                kwargs={
                    "lost_replies": who == 2,
                    "seed": 11,
                    "idle_seconds": 12.0,
                    "until": str(restarted),
                },
            )
            for who in range(3)
        ]
        for p in procs:
            p.start()
        try:
            deadline = time.monotonic() + 120
            while _delivered(logs) < 60 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _delivered(logs) >= 60, "the consumers did not get going"
            cluster3.kill(3)
            time.sleep(15)
            delivered_before_restart = _delivered(logs)
            cluster3.restart(3)
            restarted.touch()
            for p in procs:
                p.join(300)
                assert p.exitcode == 0, f"consumer exited with {p.exitcode}: a call raised"
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            cluster3.wait_all_up()

        deliveries, acks = groups_run.read_logs(logs)
        counted = groups_run.check(groups_of, deliveries, acks, VT)
        print(f"\n{counted}; delivered before the restart: {delivered_before_restart}")
        assert counted.acks == len(groups_of)
        assert counted.redeliveries > 0
        stats = admin.stats(queue)
        live = {k: stats[k] for k in ("in_flight", "backlog", "dead_lettered", "dropped")}
        assert live == dict.fromkeys(live, 0), stats
