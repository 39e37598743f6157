"""Message groups under concurrency at the size the issue names: 1,000 groups, four consumer
processes (one with every compare-and-set's reply lost, one SIGKILLed while it holds messages
and replaced), expiring deliveries; counted from the consumers' logs as in
``tests/integration/test_group_order_under_concurrency.py`` (tests/support/groups_run.py)."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from tests.support import groups_run

pytestmark = [pytest.mark.long]

GROUPS = 1000
PER_GROUP = 5
VT = 3.0


@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)
def test_a_thousand_groups_stay_ordered_and_exclusive_through_crashes_expiry_and_lost_replies(
    fault_mode, cassieq_options, queue_client, queue_name, tmp_path
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=VT, bucket_size=1000, max_delivery_count=50)
    groups_of = groups_run.fill(q, queue_name, GROUPS, PER_GROUP, seed=11)
    logs = [tmp_path / f"consumer-{i}.log" for i in range(5)]
    ctx = mp.get_context("spawn")

    def start(who: int, lost: bool = False):
        p = ctx.Process(
            target=groups_run.consume,
            args=(cassieq_options, queue_name, who, str(logs[who]), VT),
            kwargs={"lost_replies": lost, "seed": 11, "deadline": 900.0},
        )
        p.start()
        return p

    procs = [start(0), start(1), start(2), start(3, lost=True)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = logs[0].read_text() if logs[0].exists() else ""
        if text.count('"D"') >= 200:
            break
        time.sleep(0.1)
    groups_run.kill(procs[0].pid)
    procs[0].join(10)
    procs.append(start(4))
    for p in procs[1:]:
        p.join(960)
        assert p.exitcode == 0, f"consumer exited with {p.exitcode}"
    deliveries, acks = groups_run.read_logs(logs)
    counted = groups_run.check(groups_of, deliveries, acks, VT)
    print(f"\n{counted}")
    assert counted.groups == GROUPS and counted.redeliveries > 0
    stats = q.stats(queue_name)
    assert (stats["acked"], stats["in_flight"], stats["backlog"]) == (len(groups_of), 0, 0)
