"""Message groups under concurrency, counted from the consumers' logs (tests/support/groups_run.py):
three consumer processes (``get_many`` and ``get`` alternating) on 100 groups, one of them
with every compare-and-set's reply lost, one killed with SIGKILL while it holds messages and
replaced, and every 17th message left to its visibility timeout. For every group, delivery
order equals id order and no two deliveries of one group overlap; every message is acked once.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from tests.support import groups_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = 100
PER_GROUP = 6
VT = 2.0


@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)
def test_groups_stay_ordered_and_exclusive_through_crashes_expiry_and_lost_replies(
    fault_mode, cassieq_options, queue_client, queue_name, tmp_path
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=VT, bucket_size=200, max_delivery_count=50)
    groups_of = groups_run.fill(q, queue_name, GROUPS, PER_GROUP, seed=7)
    logs = [tmp_path / f"consumer-{i}.log" for i in range(4)]
    ctx = mp.get_context("spawn")

    def start(who: int, lost: bool = False):
        p = ctx.Process(
            target=groups_run.consume,
            args=(cassieq_options, queue_name, who, str(logs[who]), VT),
            kwargs={"lost_replies": lost, "seed": 7},
        )
        p.start()
        return p

    procs = [start(0), start(1), start(2, lost=True)]
    # Kill consumer 0 once it has logged deliveries (it holds some: it works on each 5-25 ms).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = logs[0].read_text() if logs[0].exists() else ""
        if text.count('"D"') >= 30:
            break
        time.sleep(0.05)
    groups_run.kill(procs[0].pid)
    procs[0].join(10)
    procs.append(start(3))
    for p in procs[1:]:
        p.join(180)
        assert p.exitcode == 0, f"consumer exited with {p.exitcode}"

    deliveries, acks = groups_run.read_logs(logs)
    killed_held = {d[0] for d in deliveries if d[5] == 0} - {
        mid for (mid, _v), (_a0, ok) in acks.items() if ok
    }
    counted = groups_run.check(groups_of, deliveries, acks, VT)
    print(f"\n{counted}; held by the killed consumer: {len(killed_held)}")
    assert counted.redeliveries > 0 and killed_held
    assert all(counted.per_consumer.get(w, 0) > 0 for w in (0, 1, 2, 3)), counted.per_consumer
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (len(groups_of), 0, 0)
