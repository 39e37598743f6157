"""``dead_letter(..., batch_id=, query_checkpoint=)`` routes a batch's dead letters as its first
call did: an operator who points the origin queue at another dead-letter queue while the batch
is uncommitted does not make its replay send the rows to the new one (where the replay keys are
free, so they would be written again, and the first attempt's copies stay in the old one); the
next batch uses the new setting. Real Cassandra, real local Spark (for the columns only)."""

from __future__ import annotations

import json

import pytest

import cassieq_spark
from cassieq_spark.errors import ConfigError

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_replayed_batch_routes_its_dead_letters_as_its_first_attempt_did(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    origin, old, new = (f"{queue_name}_{s}" for s in ("o", "dlq1", "dlq2"))
    queue_client.create_queue(old)
    queue_client.create_queue(new)
    queue_client.create_queue(origin, dead_letter_queue=old)
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "metadata").write_text(json.dumps({"id": f"query-{queue_name}"}) + "\n")
    rows = sspark.createDataFrame(
        [(7, b"x", origin, "bad")], "id bigint, value binary, queue string, reason string"
    )

    def routed(batch_id: int) -> list[str]:
        out = cassieq_spark.dead_letter(
            rows, batch_id=batch_id, query_checkpoint=str(ck), **cassieq_options
        )
        return [r.queue for r in out.collect()]

    assert routed(0) == [old]
    queue_client.update_queue(origin, dead_letter_queue=new)  # while batch 0 is uncommitted
    assert routed(0) == [old], "the replay of batch 0 routes as its first attempt"
    assert routed(1) == [new], "the next batch takes the new setting"
    with pytest.raises(ConfigError, match="both or neither"):
        cassieq_spark.dead_letter(rows, batch_id=1, **cassieq_options)
