"""Dead letters are never dropped by their dead-letter queue's own delivery limit.

A dead-letter queue is an ordinary queue (default ``max_delivery_count`` 5, no dead-letter
queue of its own). Looking at a dead letter with ``get`` and no ack, or a redrive that fails
after its claim, counts a delivery; the sixth used to drop the message (protocol review 2,
G10): the one copy left of a message that had already failed. A queue that is another queue's
dead-letter queue and has none of its own keeps such messages, for clients and for a
streaming query alike. Real Cassandra; failed redrives through the fault seam.
"""

from __future__ import annotations

import re
import time

import pytest

from cassieq_spark.engine.store import faults

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

# Each inspection's visibility timeout: due again a moment later, and longer than a get takes
# on a loaded runner (a get that outlasts it hands out nothing; gets of more than 0.6 s
# happen under the load of `make test`).
VT = 1.2


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def writes_to_the_destination(cql: str) -> bool:
    """The first writes a redrive makes for the destination after its claim: the record of
    its batch (and the keys of its rows) in the destination's ``reservation_keys``. The
    claim's own writes (its timer, in a batch) are left alone: a claim whose timer write
    fails is not made, which counts no delivery."""
    return bool(re.search(r"INSERT INTO \S*reservation_keys", cql))


def dead_letter(q, name: str) -> tuple[str, str]:
    """A source queue whose first failed delivery moves the message to its dead-letter queue
    (default settings); returns (source, dead-letter queue) with one dead letter in it."""
    src, dlq = f"{name}_src", f"{name}_dlq"
    q.create_queue(dlq)
    q.create_queue(src, max_delivery_count=1, dead_letter_queue=dlq)
    q.put(src, b"poison")
    assert q.get(src, visibility_timeout=VT) is not None
    time.sleep(VT + 0.1)
    assert q.get(src, visibility_timeout=VT) is None  # moved on this get
    assert q.stats(src)["dead_lettered"] == 1
    return src, dlq


def inspect(q, dlq: str, times: int) -> list[int]:
    """``times`` gets without an ack, each after the previous one expired: delivery counts."""
    counts = []
    for _ in range(times):
        deadline = time.monotonic() + 5
        m = q.get(dlq, visibility_timeout=VT)
        while m is None and time.monotonic() < deadline:
            time.sleep(0.05)
            m = q.get(dlq, visibility_timeout=VT)
        assert m is not None, f"the dead letter is gone after {len(counts)} inspections"
        assert m.payload == b"poison"
        counts.append(m.delivery_count)
        time.sleep(VT + 0.05)
    return counts


def test_a_dead_letter_inspected_past_the_delivery_limit_stays_and_redrives(
    queue_client, queue_name
):
    """Seven gets without an ack on a dead-letter queue with max_delivery_count 5. Before the
    fix the sixth found nothing: the dead letter was dropped (`dropped` 1). Now every get
    delivers it, and a redrive then brings it back to its source."""
    q = queue_client
    src, dlq = dead_letter(q, queue_name)
    assert inspect(q, dlq, 7) == [1, 2, 3, 4, 5, 6, 7]
    assert q.stats(dlq)["dropped"] == 0
    time.sleep(VT)
    assert q.redrive(dlq, to=src, visibility_timeout=VT).moved == 1
    assert q.get(src).payload == b"poison"


def test_failed_redrives_past_the_delivery_limit_never_drop_the_dead_letter(
    queue_client, queue_name
):
    """Six redrives whose write to the destination fails (a timeout before its first), each
    after the previous claim expired: before the fix the sixth found the dead letter dropped
    and moved nothing. Now the seventh redrive moves it."""
    q = queue_client
    src, dlq = dead_letter(q, queue_name)
    for attempt in range(6):
        faults.inject(faults.TIMEOUT_BEFORE, writes_to_the_destination, times=None)
        try:
            report = q.redrive(dlq, to=src, visibility_timeout=VT)
        except Exception:  # noqa: S110 - the injected failure of the destination's write
            report = None
        finally:
            faults.reset()
        st = q.stats(dlq)
        assert report is None and st["dropped"] == 0, f"redrive {attempt + 1}: {report}, {st}"
        time.sleep(VT + 0.1)
    report = q.redrive(dlq, to=src, visibility_timeout=VT)
    assert report.moved == 1, report
    assert q.get(src).payload == b"poison"


def test_a_streaming_query_delivers_a_dead_letter_clients_got_past_the_limit(
    queue_client, queue_name, drivers
):
    """A stream reads the dead-letter queue after six inspections: its delivery counting
    moved (dropped, without a dead-letter queue) every message clients had received
    max_delivery_count times, dead letters too. Now it delivers it."""
    q = queue_client
    _src, dlq = dead_letter(q, queue_name)
    inspect(q, dlq, 6)
    time.sleep(VT)
    d = drivers(dlq, consumerId="g10")
    d.start()
    got = d.batch()
    d.commit()
    assert len(got) == 1, got
    st = q.stats(dlq)
    assert st["dropped"] == 0 and st["backlog"] == 0, st
