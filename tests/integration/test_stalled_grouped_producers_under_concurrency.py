"""Grouped producers whose puts stall past the repair timeout, racing consumers and repair, all
in processes of their own against the real Cassandra (docs/groups.md, "What is guaranteed"):
two producer processes put to 20 groups, one of them stalling every 5th call with its rows
written and its block not closed until readers have handed the block to repair; two consumer
processes (``get_many`` and ``get`` alternating, every 17th first delivery left to expire)
consume while they put, and repair runs every half second. Counted from the logs
(tests/support/groups_run.py): every id a put returned is acked exactly once and nothing else
is; for every group, delivery order equals the order of the ids the puts returned, and no two
deliveries of one group overlap.
"""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest

from tests.support import groups_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VT = 2.0
REPAIR_TIMEOUT = 1.0


def test_stalled_grouped_puts_are_delivered_in_returned_id_order_each_once(
    cassieq_options, queue_client, queue_name, tmp_path
):
    q = queue_client
    q.create_queue(
        queue_name, visibility_timeout=VT, repair_timeout=REPAIR_TIMEOUT, max_delivery_count=50
    )
    ctx = mp.get_context("spawn")
    put_logs = [tmp_path / f"producer-{i}.log" for i in range(2)]
    get_logs = [tmp_path / f"consumer-{i}.log" for i in range(2)]
    done = tmp_path / "producers-done"
    producers = [
        ctx.Process(
            target=groups_run.produce,
            args=(cassieq_options, queue_name, i, str(put_logs[i]), 20, 40),
            kwargs={"stall_every": 5 if i == 0 else 0, "stall_seconds": 2.5, "seed": 3},
        )
        for i in range(2)
    ]
    consumers = [
        ctx.Process(
            target=groups_run.consume,
            args=(cassieq_options, queue_name, i, str(get_logs[i]), VT),
            kwargs={"seed": 3, "idle_seconds": 6.0, "until": str(done)},
        )
        for i in range(2)
    ]
    stop = threading.Event()
    repairs = []

    def repair_loop() -> None:
        while not stop.wait(0.5):
            repairs.append(q.repair(queue_name, repair_timeout=0.5))

    repairer = threading.Thread(target=repair_loop, daemon=True)
    for p in producers + consumers:
        p.start()
    repairer.start()
    try:
        for p in producers:
            p.join(240)
            assert p.exitcode == 0, f"producer {p.name} exited with {p.exitcode}"
        done.touch()
        for p in consumers:
            p.join(240)
            assert p.exitcode == 0, f"consumer {p.name} exited with {p.exitcode}"
    finally:
        stop.set()
        repairer.join(30)
    groups_of = groups_run.read_puts(put_logs)
    deliveries, acks = groups_run.read_logs(get_logs)
    counted = groups_run.check(groups_of, deliveries, acks, VT)
    handed_over = sum(r.republished for r in repairs)
    print(
        f"\n{counted}; messages put: {len(groups_of)}; counted republished by repair: {handed_over}"
    )
    assert handed_over > 0, "no block was handed to repair: the stalls did not stall"
