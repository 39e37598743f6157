"""A message of the stream is named by (queue, incarnation, id): ids restart at 0 when a queue is
deleted and created again, and ``queuePattern`` reads the new queue from its beginning, so
``dropDuplicates("queue", "id")`` downstream would drop the new queue's messages while the
source acks them (spark-semantics review 2, S5). The source's ``incarnation`` column tells the
two apart. Spark's driver calls are made in this process (``support.driver``)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_recreated_queue_rows_differ_in_incarnation_not_in_id(
    query_drivers, queue_client, queue_name
):
    a = f"{queue_name}_a"
    queue_client.create_queue(a, bucket_size=10)
    queue_client.put_many(a, [b"first-0", b"first-1"])
    d = query_drivers(queuePattern=f"{queue_name}_.*", consumerId=f"{queue_name}-k")
    d.start()
    end = d.plan()
    first = d.rows(d.offset, end)
    d.offset = end
    d.commit()

    queue_client.delete_queue(a)
    queue_client.create_queue(a, bucket_size=10)
    queue_client.put_many(a, [b"again-0", b"again-1"])
    rows = first
    for _ in range(4):  # the new queue joins (a batch delivering nothing of it), then is read
        end = d.plan()
        if end is not None:
            rows = rows + d.rows(d.offset, end)
            d.offset = end
        if len(rows) == 4:
            break
    d.commit()

    assert sorted(r["value"] for r in rows) == [b"again-0", b"again-1", b"first-0", b"first-1"]
    assert len({(r["queue"], r["id"]) for r in rows}) == 2  # what a (queue, id) key would keep
    keys = {(r["queue"], r["incarnation"], r["id"]) for r in rows}
    assert len(keys) == 4, rows
    assert {r["incarnation"] for r in rows if r["value"].startswith(b"again")} == {
        str(queue_client.get_queue(a).queue_id)
    }
