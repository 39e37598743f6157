"""The sink's target check when the checkpoint comes only from the session setting
``spark.sql.streaming.checkpointLocation`` (with ``queryName``): no ``checkpointLocation``
option reaches the sink, so the record in the checkpoint is not there to compare; the check
keyed by the query's id (which every task of the query sees) still refuses a restart that
points at another queue, before a row is written there. Real Cassandra, real local Spark."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest
from support.queues import drain

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 180


def test_a_restart_to_another_queue_is_refused_with_the_checkpoint_from_the_session_setting(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    a, b = f"{queue_name}_a", f"{queue_name}_b"
    queue_client.create_queue(a)
    queue_client.create_queue(b)
    indir = tmp_path / "in"
    indir.mkdir()
    (indir / "1.json").write_text(json.dumps({"value": "first"}) + "\n")
    name = f"target_{uuid.uuid4().hex[:8]}"

    def run(queue: str):
        q = (
            sspark.readStream.schema("value string")
            .json(str(indir))
            .writeStream.format("cassieq")
            .options(**cassieq_options)
            .option("queue", queue)
            .queryName(name)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(TIMEOUT)
        except Exception as exc:  # the query failed: awaitTermination raises its error
            return exc
        return q.exception()

    sspark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        assert run(a) is None
        (indir / "2.json").write_text(json.dumps({"value": "second"}) + "\n")
        error = run(b)
    finally:
        sspark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert error is not None and "allowTargetChange" in str(error), error
    assert f"'{b}'" in str(error) and f"'{a}'" in str(error), error
    assert drain(queue_client, a) == Counter({"first": 1})
    assert drain(queue_client, b) == Counter(), "nothing written to the other queue"
