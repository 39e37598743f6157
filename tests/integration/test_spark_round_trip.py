"""The smoke test of the connector (part of `make test-fast`): rows written by a streaming query
come out of a streaming read of the same queue exactly once, across a replay of the sink's last
batch (a crash after the sink wrote it, before Spark logged its commit) and a replay of the
source's last batch (a crash before the source's commit acked it)."""

from __future__ import annotations

from collections import Counter

import pytest
from support.sink import drop_last_commit, run_available_now, write_text_files
from support.stream import Collector, start

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.fast]


def test_rows_go_from_a_stream_through_the_queue_to_a_stream_once_across_replays(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    files = {f"f{k}.txt": [f"file{k}-line{i}" for i in range(200)] for k in range(2)}
    expected = Counter(line for lines in files.values() for line in lines)
    write_text_files(tmp_path / "in", files)
    sink_ck = tmp_path / "sink-ck"
    run_available_now(
        sspark, cassieq_options, queue_name, tmp_path / "in", sink_ck, createQueue="true"
    )
    last = drop_last_commit(sink_ck)
    query = run_available_now(sspark, cassieq_options, queue_name, tmp_path / "in", sink_ck)
    assert [p.batchId for p in query.recentProgress if p.numInputRows > 0] == [last]
    assert queue_client.stats(queue_name)["enqueued"] == sum(expected.values())

    opts = {**cassieq_options, "queue": queue_name, "maxMessagesPerTrigger": 150}
    first = Collector(fail_on_batch=1)  # the second batch fails: not acked, read again
    q = start(sspark, opts, first, tmp_path / "src-ck", {"availableNow": True})
    with pytest.raises(Exception, match="fails on purpose in batch 1"):
        q.awaitTermination(180)
    again = Collector()
    q = start(sspark, opts, again, tmp_path / "src-ck", {"availableNow": True})
    assert q.awaitTermination(180) and q.exception() is None
    got = Counter(r.value.decode() for r in first.rows + again.rows)
    assert got == expected, f"lost {expected - got}, duplicated {got - expected}"
    assert sorted(first.ids + again.ids) == sorted(set(first.ids + again.ids))
    stats = queue_client.stats(queue_name)
    assert stats["backlog"] == stats["in_flight"] == 0
