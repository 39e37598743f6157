"""A stream batch replayed after clients received and acked some of its messages reads the
rows its first attempt read.

A query run plans and reads batch N, then dies before Spark's commit; its lease lapses and
clients consume part of the batch; the restarted run replays N with the same offsets. Writes
keyed on the batch (the cassieq sink, ``df.write`` with ``writeId``) compare the replay with
the first attempt and fail closed on other rows: a replay with two rows fewer made a
queue-to-cassieq pipeline fail with ``ReplayMismatchError`` on every restart (protocol review
2, G9). The replay reads each row as the batch's planning found it: an ack or a first delivery
written since is not taken into account. The messages clients received are then delivered
twice (at least once), none is lost.

The stream is the Spark source's driver side in this process (``support.driver.Driver``), the
batch's keyed write a :class:`KeyedWrite` (what a sink task runs), against the real Cassandra.
"""

from __future__ import annotations

from collections import Counter

import pytest

from cassieq_spark.engine.write.keyed_write import KeyedWrite

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


def read_batch(driver, start: dict, end: dict) -> list[tuple[int, bytes, int]]:
    """(id, value, delivery_count) of what the batch ``(start, end]`` delivers, in id order."""
    out = []
    for part in driver.reader.partitions(start, end):
        for batch in driver.reader.read(part):
            cols = batch.to_pydict()
            out += zip(cols["id"], cols["value"], cols["delivery_count"], strict=True)
    driver.delivered.update(i for i, _, _ in out)
    return sorted(out)


def write_batch(queue_client, queue: str, batch_key: str, values: list[bytes]):
    """What a sink task writes for the batch: one keyed write (a replay finds its block)."""
    w = KeyedWrite(
        queue_client.conn,
        queue_client.get_queue(queue),
        batch_key,
        block_size=100,
        what=f"batch {batch_key}",
    )
    w.add(values, None, None, [len(v) for v in values])
    return w.finish()


def test_a_replay_after_clients_received_and_acked_part_of_the_batch_reads_the_same_rows(
    queue_client, queue_name, drivers
):
    """Batch 0 (ids 0..9) is read and written downstream, then the run dies. A client gets and
    acks two of its messages and holds a third. Before the fix the replay read 7 rows and the
    keyed write of the replay failed with ReplayMismatchError (every restart would). Now it
    reads the same 10 rows with the same delivery counts, the keyed write skips them all, and
    the commit leaves nothing behind."""
    q = queue_client
    src, dst = f"{queue_name}_src", f"{queue_name}_dst"
    q.create_queue(src, bucket_size=100)
    q.create_queue(dst)
    ids = q.put_many(src, [f"m{i}".encode() for i in range(10)])
    first_run = drivers(src, consumerId="g9")
    start = first_run.start()
    end = first_run.plan()
    first = read_batch(first_run, start, end)
    assert [i for i, _, _ in first] == ids
    assert write_batch(q, dst, "g9:0", [v for _, v, _ in first]).written == 10
    first_run.reader.stop()  # dies before the commit: the lease is free for clients

    for _ in range(2):
        m = q.get(src, visibility_timeout=30)
        assert m is not None and q.ack(src, m.pop_receipt)
    held = q.get(src, visibility_timeout=30)
    assert held is not None

    replay_run = drivers(src, consumerId="g9")
    replay = read_batch(replay_run, start, end)
    assert replay == first, f"first attempt {first}, replay {replay}"
    report = write_batch(q, dst, "g9:0", [v for _, v, _ in replay])
    assert (report.written, report.replayed) == (0, 10)
    replay_run.start(end)
    replay_run.commit()

    assert Counter(replay_run.delivered) == Counter(dict.fromkeys(ids, 1))
    st = q.stats(src)
    assert st["backlog"] == 0 and st["acked"] == 2 + 7, st  # the held one is the client's
    assert q.stats(dst)["enqueued"] == 10
