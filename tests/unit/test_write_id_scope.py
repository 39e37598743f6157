"""The key of a ``df.write`` with a ``writeId``: keyed with its streaming query and batch,
whether Spark's stream thread shows them or options ``batchId`` and ``queryCheckpoint`` name
them (the same key both ways, so a replay finds it in either), and refused where neither does
(Spark Connect, a thread of the user's own) instead of falling back to the bare ``writeId``,
whose keys every other batch with the same ``writeId`` would meet. No Spark, no Cassandra."""

from __future__ import annotations

import json

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.options import sink_options
from cassieq_spark.spark.sink import SinkPlan, write_key
from cassieq_spark.spark.sink_input import InputLayout
from cassieq_spark.spark.sink_target import query_id_of

QUERY = "5b3a0c9e-1f1e-4c39-a8a2-2f0d8c1b7e11"


class Ctx:
    """TaskContext's local properties as Spark sets them (or not) on a task."""

    def __init__(self, **props: str):
        self.props = props

    def getLocalProperty(self, key: str) -> str | None:
        return self.props.get(key)


STREAM_THREAD = Ctx(**{"sql.streaming.queryId": QUERY, "streaming.sql.batchId": "7"})
OTHER_THREAD = Ctx()  # over Connect, or a thread started inside foreachBatch


def _plan(scope: str | None = None, **options: str) -> SinkPlan:
    opts = sink_options({"queue": "q", **options}, streaming=False)
    return SinkPlan(opts, None, InputLayout(0, True, None, None), False, "random", scope)


def test_a_write_id_on_the_stream_thread_is_keyed_by_query_and_batch():
    assert write_key(_plan(writeId="dlq"), STREAM_THREAD) == f"w:{QUERY}:7:dlq"


def test_a_write_id_that_cannot_see_its_batch_is_refused_saying_what_to_do():
    for ctx in (OTHER_THREAD, None):
        with pytest.raises(ConfigError) as err:
            write_key(_plan(writeId="dlq"), ctx)
        text = str(err.value)
        assert "batchId" in text and "queryCheckpoint" in text and "writeIdScope=global" in text


def test_a_batch_named_by_options_has_the_key_the_stream_thread_gives_it():
    plan = _plan(f"{QUERY}:7", writeId="dlq", batchId="7", queryCheckpoint="/ck")
    assert write_key(plan, OTHER_THREAD) == write_key(_plan(writeId="dlq"), STREAM_THREAD)
    assert write_key(plan, STREAM_THREAD) == f"w:{QUERY}:7:dlq"
    wrong = Ctx(**{"sql.streaming.queryId": QUERY, "streaming.sql.batchId": "8"})
    with pytest.raises(ConfigError, match="batch_id as batchId"):
        write_key(plan, wrong)


def test_a_global_write_id_is_the_key_itself_and_a_write_without_one_is_random():
    assert write_key(_plan(writeId="job-1", writeIdScope="global"), OTHER_THREAD) == "w:job-1"
    assert write_key(_plan(), OTHER_THREAD) == "w:random"


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"batchId": "1", "queryCheckpoint": "/ck"}, False, "writeId"),
        ({"writeId": "w", "batchId": "1"}, False, "'queryCheckpoint' is missing"),
        ({"writeId": "w", "queryCheckpoint": "/ck"}, False, "'batchId' is missing"),
        ({"writeId": "w", "writeIdScope": "global", "batchId": "1"}, False, "drop one"),
        ({"batchId": "1"}, True, "df.write inside foreachBatch"),
        ({"writeId": "w", "batchId": "-1", "queryCheckpoint": "/ck"}, False, "batchId"),
        ({"writeId": "w", "writeIdScope": "query"}, False, "batch, global"),
    ],
)
def test_write_scope_options_are_checked(options, streaming, message):
    with pytest.raises(ConfigError, match=message):
        sink_options({"queue": "q", **options}, streaming=streaming)


def test_the_query_id_comes_from_the_checkpoint_metadata(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    with pytest.raises(ConfigError, match="no streaming query's metadata"):
        query_id_of(str(ck))
    (ck / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
    assert query_id_of(str(ck)) == QUERY
    assert query_id_of(f"file://{ck}") == QUERY
