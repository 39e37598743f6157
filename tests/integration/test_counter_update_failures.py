"""A counter update that fails never fails the call it counts for.

Counters are totals kept beside the queue (docs/status.md: exact unless Cassandra fails
mid-operation): an ack whose message row is gone must return True even when the ``acked``
update after it fails, as a replica being killed makes it fail (``WriteFailure`` from the
replica leading the update). Real Cassandra; the failure through the fault seam.
"""

from __future__ import annotations

import pytest

from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration]


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def counter_updates(cql: str) -> bool:
    return "counters SET" in cql


@pytest.mark.parametrize("mode", [faults.FAILED_BEFORE, faults.TIMEOUT_BEFORE])
def test_an_ack_whose_counter_update_fails_still_acks(queue_client, queue_name, mode, caplog):
    q = queue_client
    q.create_queue(queue_name)
    q.put(queue_name, b"m")
    m = q.get(queue_name, visibility_timeout=30)
    assert m is not None
    faults.inject(mode, counter_updates, times=None)
    assert q.ack(queue_name, m.pop_receipt) is True
    faults.reset()
    assert q.get(queue_name) is None
    assert "may not be recorded" in caplog.text
