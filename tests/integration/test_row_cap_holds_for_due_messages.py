"""``maxMessagesPerTrigger`` caps delayed and redelivered messages too: they come through the
timer path once due, and the batch time is chosen so that at most the cap's worth is due in
one batch, the earliest first (spark-semantics review 2, S11; before, one batch carried every
message that had become due, whatever the cap). Spark's driver calls are made in this process
(``support.driver``)."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

pytestmark = pytest.mark.integration

CAP = 10
DELAY = 5.0  # longer than the 30 puts and the first batch take


def test_messages_due_together_come_in_batches_of_the_cap(drivers, queue_client, queue_name):
    queue_client.create_queue(queue_name, bucket_size=100)
    # one put each: due times some ms apart (messages due in one millisecond come together)
    ids = [queue_client.put(queue_name, f"m{i}", delay=DELAY + 0.01 * i) for i in range(30)]
    all_due = time.monotonic() + DELAY + 0.5
    d = drivers(queue_name)
    d.start()
    assert d.batch() == []  # the id path passes them: not due yet
    time.sleep(max(0.0, all_due - time.monotonic()))
    sizes = []
    for _ in range(10):
        got = d.batch(ReadMaxRows(CAP))
        if not got:
            break
        sizes.append(len(got))
    d.commit()
    assert sorted(d.delivered) == ids and set(Counter(d.delivered).values()) == {1}
    assert max(sizes) <= CAP, f"batch sizes {sizes} with maxMessagesPerTrigger {CAP}"
    assert queue_client.stats(queue_name)["acked"] == 30
