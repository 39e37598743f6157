"""The streaming source and message groups (docs/groups.md, "From Spark"): a micro-batch holds
a stretch of ids, so a group's messages come in id order across batches, and a failed batch is
replayed whole (the same ids) before any later one: for every group, the deliveries Spark
committed, in (batch, id) order, are the group's ids in order, each once. Within a batch the
query orders a group's rows itself (``repartition("group").sortWithinPartitions("id")``)."""

from __future__ import annotations

import collections

import pytest

from cassieq_spark.spark import register
from tests.support import groups_run
from tests.support.stream import Collector, start

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_groups_keep_id_order_across_micro_batches_and_a_failed_batch(
    spark, queue_client, queue_name, cassieq_options, tmp_path
):
    register(spark)
    q = queue_client
    q.create_queue(queue_name, bucket_size=100)
    groups_of = groups_run.fill(q, queue_name, groups=8, per_group=10, seed=3)
    options = {**cassieq_options, "queue": queue_name, "maxMessagesPerTrigger": 20}
    failing = Collector(fail_on_batch=1)
    query = start(spark, options, failing, tmp_path / "ck", {"availableNow": True})
    with pytest.raises(Exception, match="fails on purpose"):
        query.awaitTermination(180)
    assert set(failing.batches) == {0}  # batch 1 failed: not committed, nothing acked
    again = Collector()
    query = start(spark, options, again, tmp_path / "ck", {"availableNow": True})
    assert query.awaitTermination(180) and query.exception() is None

    batches = sorted([*failing.batches.items(), *again.batches.items()])
    assert batches[0][0] == 0 and len(batches) >= 4, [b for b, _ in batches]
    seen = collections.defaultdict(list)
    for batch_id, ids in batches:
        for mid in sorted(ids):
            seen[groups_of[mid]].append((batch_id, mid))
    for group, deliveries in seen.items():
        ids = [mid for _b, mid in deliveries]
        expected = sorted(m for m, g in groups_of.items() if g == group)
        assert ids == expected, f"group {group}: {deliveries}"
    rows = failing.rows + again.rows
    assert {r.id: r.group for r in rows} == groups_of
    assert q.stats(queue_name)["backlog"] == 0
