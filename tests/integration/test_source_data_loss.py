"""failOnDataLoss, against the real Cassandra and a real local Spark: ids repair counted as lost
(reserved, never written) fail a streaming query with DataLossError, or are logged as a warning
and the query goes on; each lost range is reported once; stats show the counts.

The hole is made deterministically: a reservation of ids 5 and 6 that nobody ever writes, with
messages on both sides of it. Once the repair timeout passes, the stream passes the hole (and
hands it to repair); repair then counts 5 and 6 lost.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from support.stream import Collector, start, wait_for

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.upkeep import lost
from cassieq_spark.errors import DataLossError, QueueBusyError
from cassieq_spark.spark.source import CassieQStreamReader

pytestmark = [pytest.mark.integration]

REPAIR_TIMEOUT = 2.0
DELIVERED = [0, 1, 2, 3, 4, 7, 8, 9]  # all but the hole 5, 6
PACED = {"processingTime": "500 milliseconds"}


def _queue_with_a_hole(client, name) -> None:
    client.create_queue(name, bucket_size=10, repair_timeout=REPAIR_TIMEOUT)
    info = client.get_queue(name)
    assert client.put_many(name, [b"a"] * 5) == [0, 1, 2, 3, 4]
    hole = monoton.reserve(client.conn, info, 2)  # a producer that dies before writing
    assert (hole.lo, hole.hi) == (5, 7)
    assert client.put_many(name, [b"b"] * 3) == [7, 8, 9]


def _repair_counts_the_hole(client, name) -> None:
    # The stream recorded the hole when it passed it; a short timeout makes it due at once.
    deadline = time.monotonic() + 30
    counted = 0
    while counted < 2 and time.monotonic() < deadline:
        counted += client.repair(name, repair_timeout=0.1).lost_ids
        time.sleep(0.2)
    assert counted == 2


def _opts(cassieq_options, name, **extra) -> dict:
    return {**cassieq_options, "queue": name, "consumerId": f"{name}-c", **extra}


@pytest.mark.parametrize("fail", [True, False])
def test_reader_reports_each_lost_range_once(
    queue_client, queue_name, cassieq_options, caplog, fail
):
    """The driver-side reader without Spark (its log is visible here): the trigger after repair
    counted the hole fails, or warns and plans on; no later trigger reports it again."""
    _queue_with_a_hole(queue_client, queue_name)
    caplog.set_level(logging.WARNING, logger="cassieq_spark.spark.source")
    reader = CassieQStreamReader(
        _opts(cassieq_options, queue_name, failOnDataLoss=str(fail).lower())
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end["id"] == 5  # the hole's writer may still be alive
        time.sleep(REPAIR_TIMEOUT + 0.3)
        end = reader.latestOffset(end, ReadAllAvailable())
        assert end["id"] == 10  # passed, handed to repair
        stats = queue_client.stats(queue_name)
        assert stats["lost"] == 0 and stats["lost_ranges"] == 0
        _repair_counts_the_hole(queue_client, queue_name)
        stats = queue_client.stats(queue_name)
        assert stats["lost"] == 2
        assert stats["lost_ranges"] == 1 and stats["lost_ranges_unreported"] == 1
        queue_client.put(queue_name, b"after")
        if fail:
            with pytest.raises(DataLossError) as info:
                reader.latestOffset(end, ReadAllAvailable())
            err = info.value
            assert err.queue == queue_name and err.ranges == ((5, 7, 2),)
            text = str(err)
            assert f"queue {queue_name!r}" in text and "5..6 (2 lost: 5, 6)" in text
            assert "never written" in text and "failOnDataLoss=false" in text
            assert "restart" in text
        else:
            assert reader.latestOffset(end, ReadAllAvailable())["id"] == 11
            assert "5..6 (2 lost: 5, 6)" in caplog.text and queue_name in caplog.text
            assert "failOnDataLoss=false" in caplog.text
        caplog.clear()
        # Reported once: the next trigger (or a restart) goes on past it, silently.
        again = reader.latestOffset(end, ReadAllAvailable())
        assert again["id"] == 11 and "lost" not in caplog.text
        assert queue_client.stats(queue_name)["lost_ranges_unreported"] == 0
    finally:
        reader.stop()


def test_lost_ranges_before_a_new_query_are_not_reported_to_it(
    queue_client, queue_name, cassieq_options
):
    """A query started after the loss never needed those ids: passed, not reported."""
    _queue_with_a_hole(queue_client, queue_name)
    for _ in range(5):
        queue_client.ack(queue_name, queue_client.get(queue_name).pop_receipt)
    time.sleep(REPAIR_TIMEOUT + 0.3)
    got = [queue_client.get(queue_name) for _ in range(3)]  # clients pass the hole
    assert [m.id for m in got] == [7, 8, 9]
    _repair_counts_the_hole(queue_client, queue_name)
    reader = CassieQStreamReader(_opts(cassieq_options, queue_name))
    try:
        init = reader.initialOffset()
        assert reader.latestOffset(init, ReadAllAvailable())["id"] >= init["id"]
    finally:
        reader.stop()
    # `cassieq stats QUEUE`: the same counts as JSON
    env = {
        **os.environ,
        "CASSIEQ_CONTACT_POINTS": cassieq_options["contactPoints"],
        "CASSIEQ_PORT": cassieq_options["port"],
        "CASSIEQ_KEYSPACE": cassieq_options["keyspace"],
    }
    cli = Path(sys.executable).parent / "cassieq"
    out = subprocess.run(
        [str(cli), "stats", queue_name], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert (stats["lost"], stats["lost_ranges"], stats["lost_ranges_unreported"]) == (2, 1, 0)


def test_describe_caps_the_ids_it_names():
    many = [
        lost.LostRange(i * 100, i * 100 + 50, 50, tuple(range(i * 100, i * 100 + 50)), "x", None)
        for i in range(30)
    ]
    text = lost.describe("q", many)
    assert text.startswith("queue 'q': 1500 message ids lost in 30 ranges: 0..49 (50 lost: 0, 1")
    assert "and 30 more" in text and "and 10 more ranges" in text
    assert len(text) < 2000


@pytest.mark.spark
@pytest.mark.parametrize("value", ["maybe", "", "2"])
def test_bad_fail_on_data_loss_fails_at_load(sspark, queue_name, cassieq_options, value):
    opts = {**cassieq_options, "queue": queue_name, "failOnDataLoss": value}
    with pytest.raises(Exception, match="option 'failOnDataLoss' must be true or false"):
        sspark.readStream.format("cassieq").options(**opts).load()


@pytest.mark.spark
def test_query_fails_with_data_loss_error_and_a_restart_goes_on(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    _queue_with_a_hole(queue_client, queue_name)
    opts = _opts(cassieq_options, queue_name)  # failOnDataLoss: true by default
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", PACED)
    try:
        wait_for(lambda: c.ids == DELIVERED, 60, "everything but the hole", q)
        _repair_counts_the_hole(queue_client, queue_name)
        with pytest.raises(Exception, match="DataLossError") as info:
            q.awaitTermination(60)
        err = str(info.value)
        assert "DataLossError" in err and f"queue {queue_name!r}" in err
        assert "5..6 (2 lost: 5, 6)" in err and "failOnDataLoss=false" in err
    finally:
        q.stop()
    assert queue_client.stats(queue_name)["lost"] == 2
    # The restart from the same checkpoint goes on past the reported range.
    (after,) = queue_client.put_many(queue_name, [b"after"])
    q = start(sspark, opts, c, tmp_path / "ck", PACED)
    try:
        wait_for(lambda: after in c.ids, 60, "the message after the restart", q)
        assert q.exception() is None and q.isActive
    finally:
        q.stop()
    assert c.ids == [*DELIVERED, after]


@pytest.mark.spark
def test_query_with_fail_on_data_loss_false_goes_on(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    _queue_with_a_hole(queue_client, queue_name)
    opts = _opts(cassieq_options, queue_name, failOnDataLoss="false")
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", PACED)
    try:
        wait_for(lambda: c.ids == DELIVERED, 60, "everything but the hole", q)
        _repair_counts_the_hole(queue_client, queue_name)
        # Reported (the warning is logged in Spark's Python worker; see the reader test).
        wait_for(
            lambda: queue_client.stats(queue_name)["lost_ranges_unreported"] == 0,
            30,
            "the query to report the lost range",
            q,
        )
        later = queue_client.put_many(queue_name, [b"c"] * 3)
        wait_for(lambda: c.ids == [*DELIVERED, *later], 60, "the messages after the loss", q)
        assert q.isActive and q.exception() is None
    finally:
        q.stop()
    stats = queue_client.stats(queue_name)
    assert stats["lost"] == 2 and stats["lost_ranges"] == 1 and stats["lost_ranges_unreported"] == 0


def _purge(client, name) -> int:
    """Purge once the stopped query's lease is free (a stop releases it; a kill leaves it)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return client.purge(name).purged
        except QueueBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.spark
@pytest.mark.parametrize("fail", [True, False])
def test_a_purge_while_the_query_is_stopped_is_reported_when_it_restarts(
    sspark, queue_client, queue_name, cassieq_options, tmp_path, fail
):
    """Messages written after the query stopped and purged before it ran again were needed by
    it: the restart fails with DataLossError naming them and the purge (or warns), once; a new
    query starting after the purge never needed them and is not told."""
    queue_client.create_queue(queue_name, bucket_size=10)
    first = queue_client.put_many(queue_name, [b"a"] * 3)
    opts = _opts(cassieq_options, queue_name, failOnDataLoss=str(fail).lower())
    c = Collector()
    once = {"availableNow": True}
    assert start(sspark, opts, c, tmp_path / "ck", once).awaitTermination(120)
    assert c.ids == first
    purged = queue_client.put_many(queue_name, [b"p"] * 4)
    assert _purge(queue_client, queue_name) == 4
    stats = queue_client.stats(queue_name)
    assert (stats["lost"], stats["lost_ranges"], stats["lost_ranges_unreported"]) == (0, 1, 1)
    after = queue_client.put_many(queue_name, [b"b"] * 2)
    q = start(sspark, opts, c, tmp_path / "ck", once)
    if fail:
        with pytest.raises(Exception, match="DataLossError") as info:
            q.awaitTermination(120)
        err = str(info.value)
        span = f"{purged[0]}..{purged[-1]} (4 lost: {', '.join(map(str, purged))})"
        assert span in err and "purged" in err and f"queue {queue_name!r}" in err
        assert c.ids == first
        q = start(sspark, opts, c, tmp_path / "ck", once)  # reported once: goes on past it
    assert q.awaitTermination(120) and q.exception() is None
    assert c.ids == [*first, *after]
    assert queue_client.stats(queue_name)["lost_ranges_unreported"] == 0
    if fail:
        return

    # A new query after another purge: the purged ids lie below its start, it is not told.
    queue_client.put_many(queue_name, [b"p"] * 2)
    assert _purge(queue_client, queue_name) == 2
    late = queue_client.put_many(queue_name, [b"c"])
    fresh = Collector()
    opts_fresh = _opts(cassieq_options, queue_name, failOnDataLoss="true")
    q = start(sspark, opts_fresh, fresh, tmp_path / "ck2", once)
    assert q.awaitTermination(120) and q.exception() is None
    assert fresh.ids == late
