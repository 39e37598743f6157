"""A streaming query gets every delayed message of a range handed to repair, once.

A writer dies inside its block after writing delayed rows: one without its timer (a crash
between row and timer, as the old write order left it) and two with theirs. The stream passes
the abandoned block (handed to repair, excluded from its batches, timer path included), so
only repair can deliver those rows: it takes them over and republishes them with their delay
left (F3). The original loss was in the Spark source; the F3 tests drive clients, whose timer
path does not exclude skipped ranges (protocol review 2, section 3). Real Cassandra; the stream
is the Spark source's driver side in this process.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cassieq_spark.engine.core import clock, monoton
from cassieq_spark.engine.core.messages import write_messages

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

DELAY = 2.0


def test_a_stream_delivers_each_delayed_row_of_a_repaired_block_once(
    queue_client, queue_name, drivers
):
    q = queue_client
    q.create_queue(queue_name, bucket_size=10, repair_timeout=1.0)
    info = q.get_queue(queue_name)
    res = monoton.reserve(q.conn, info, 3)  # the writer dies: never closed
    assert res.lo == 0
    q.conn.execute(  # a delayed row whose timer was never written
        "INSERT INTO {ks}.messages (queue_id, bucket, id, payload, enqueued_at, visible_at) "
        "VALUES (?, 0, 0, ?, toTimestamp(now()), ?)",
        (info.queue_id, b"d0", clock.from_epoch(clock.now() + DELAY)),
    )
    write_messages(q.conn, info, 1, [b"d1", b"d2"], delays=[DELAY, DELAY])
    markers = q.put_many(queue_name, [f"m{i}".encode() for i in range(10)])
    time.sleep(1.2)  # the block is abandoned: the stream's plan hands it to repair

    d = drivers(queue_name, consumerId="f3-stream")
    d.start()
    values: Counter = Counter()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        end = d.plan()
        if end is not None:
            for part in d.reader.partitions(d.offset, end):
                for batch in d.reader.read(part):
                    values.update(batch.column("value").to_pylist())
            d.offset = end
        d.commit()
        q.repair(queue_name)
        if {b"d0", b"d1", b"d2"} <= set(values) and q.stats(queue_name)["repair_pointer"] >= 1:
            break
        time.sleep(0.3)
    expected = Counter({b"d0": 1, b"d1": 1, b"d2": 1})
    expected.update(f"m{i}".encode() for i in range(len(markers)))
    assert values == expected
    st = q.stats(queue_name)
    assert st["repair_pointer"] >= 1, "bucket 0 must be reclaimed"
    assert st["backlog"] == st["delayed"] == st["in_flight"] == 0, st
