"""A client claim that lands after a streaming query took the consumer lease.

A client checks the lease, then claims; a stream may take the lease in between and plan the
message. The client's fence (it reads the lease again after the claim) gives the message back
and refuses with QueueBusyError. Whatever the stream read meanwhile (the message while it was
claimed, or after it was given back), every message must then be delivered exactly once overall:
never acked unread by the stream's pointer move (review 2, G3), never stranded behind the
stream's timer window, never handed to the client as well as to the stream (F14).

The stream is the Spark source's driver side run in this process (``initialOffset``,
``latestOffset``, ``partitions``/``read``, ``commit``), so the test reads the batch at the exact
step it needs: inside the client's call, right before the client gives the claim back. Counted
by id: every delivery by the stream, and by clients once the stream has stopped.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from support.driver import Driver

from cassieq_spark.engine.store import faults
from cassieq_spark.errors import QueueBusyError

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

VT = 30.0  # the client's visibility timeout: a claim stays in flight for the whole test
SETTLE_SECONDS = 2.0  # how long batches keep running after the race, to see any redelivery


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


def run_for(driver: Driver, seconds: float) -> None:
    """Plan, read and commit batches for ``seconds`` (the timer path's redeliveries are due a
    moment after the race, by the client's clock)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        driver.batch()
        driver.commit()
        time.sleep(0.2)


def _text(statement) -> str:
    if isinstance(statement, str):
        return statement
    statement = getattr(statement, "prepared_statement", statement)
    return getattr(statement, "query_string", "") or ""


class StreamTakesOver:
    """The race, step by step, around one client call:

    1. the client passed its lease check (the queue was free);
    2. at ``point`` (right before the claim) the stream starts (takes the lease) and plans its
       first batch, which covers the message(s) the client is about to claim;
    3. the client's claim applies (the first compare-and-set on the message rows);
    4. the client's fence sees the lease taken; right before its next compare-and-set on the
       message rows (giving the claim back), ``in_window()`` runs, and the stream's executors
       read the batch when ``read_while_claimed`` (else the batch is read after the client's
       call).

    ``cas_calls``: the client's compare-and-sets on the message rows from the claim on.
    """

    def __init__(
        self,
        monkeypatch,
        conn,
        driver: Driver,
        point: str,
        read_while_claimed: bool,
        in_window: Callable[[], None] = lambda: None,
    ):
        self.driver = driver
        self.read_while_claimed = read_while_claimed
        self.end: dict | None = None
        self.read_in_window: list[int] | None = None
        self.cas_calls = 0
        self._caller = threading.current_thread()
        cas: Callable = conn.cas

        def take_over(**_context):
            faults.state.points.pop(point, None)
            driver.start()
            self.end = driver.plan()
            assert self.end is not None, "the stream planned nothing: the race did not happen"

        def cas_around_the_fence(statement, *a, **kw):
            mine = (
                self.end is not None
                and threading.current_thread() is self._caller
                and ".messages" in _text(statement)
            )
            if mine:
                self.cas_calls += 1
                if self.cas_calls == 2:
                    in_window()
                    if self.read_while_claimed:
                        self.read_in_window = driver.read(driver.offset, self.end)
            return cas(statement, *a, **kw)

        faults.on(point, take_over)
        monkeypatch.setattr(conn, "cas", cas_around_the_fence)

    def finish(self) -> None:
        """Read the planned batch (unless it was read in the window), then run batches for a
        while, and stop the stream (it releases the lease)."""
        d = self.driver
        assert self.cas_calls >= 2, "the client's claim was not given back"
        if not self.read_while_claimed:
            d.read(d.offset, self.end)
        d.offset = self.end
        d.commit()
        run_for(d, SETTLE_SECONDS)
        d.reader.stop()


def _client_deliveries(client, queue: str, seconds: float = 1.0) -> Counter:
    """What clients get (and ack) once the stream is gone."""
    got: Counter = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = client.get(queue, visibility_timeout=VT)
        if msg is None:
            time.sleep(0.1)
            continue
        got[msg.id] += 1
        assert client.ack(queue, msg.pop_receipt)
    return got


WHEN = pytest.mark.parametrize(
    "read_while_claimed",
    [True, False],
    ids=["stream reads while claimed (G3)", "stream reads after the give-back"],
)


@WHEN
def test_a_get_racing_a_stream_takeover_leaves_the_message_to_the_stream_once(
    queue_client, queue_name, drivers, monkeypatch, read_while_claimed
):
    """The single `get` of a fresh message. Read while claimed, the message is not due, so
    the first batch does not deliver it; the give-back must not then turn it into a plain row
    below the reader pointer, which the batch's ack would count as consumed (acked unread)."""
    q = queue_client
    q.create_queue(queue_name)
    mid = q.put(queue_name, b"x")
    d = drivers(queue_name, consumerId="takeover-get")
    race = StreamTakesOver(monkeypatch, q.conn, d, "consumer.before_claim", read_while_claimed)
    with pytest.raises(QueueBusyError):
        q.get(queue_name, visibility_timeout=VT)
    monkeypatch.undo()
    if read_while_claimed:
        assert race.read_in_window == []  # claimed: not due at the batch's time
    race.finish()
    total = d.delivered + _client_deliveries(q, queue_name)
    assert total == Counter({mid: 1}), f"stream {d.delivered}, clients {total - d.delivered}"
    st = q.stats(queue_name)
    assert st["backlog"] == 0 and st["in_flight"] == 0


@WHEN
def test_a_get_many_racing_a_stream_takeover_leaves_every_message_to_the_stream_once(
    queue_client, queue_name, drivers, monkeypatch, read_while_claimed
):
    """`get_many` claims a whole stretch in one batch and gives every row of it back."""
    q = queue_client
    q.create_queue(queue_name)
    ids = q.put_many(queue_name, [b"m"] * 40)
    d = drivers(queue_name, consumerId="takeover-get-many")
    race = StreamTakesOver(monkeypatch, q.conn, d, "batch.before_claim", read_while_claimed)
    with pytest.raises(QueueBusyError):
        q.get_many(queue_name, 40, visibility_timeout=VT)
    monkeypatch.undo()
    assert race.cas_calls == 2  # one conditional batch claims them, one gives them back
    if read_while_claimed:
        assert race.read_in_window == []
    race.finish()
    total = d.delivered + _client_deliveries(q, queue_name)
    assert total == Counter(dict.fromkeys(ids, 1)), (
        f"never delivered: {sorted(set(ids) - set(total))}, "
        f"more than once: {sorted(i for i, n in total.items() if n > 1)}"
    )
    st = q.stats(queue_name)
    assert st["backlog"] == 0 and st["in_flight"] == 0


@WHEN
def test_a_redelivery_racing_a_stream_takeover_is_delivered_by_the_stream_once(
    queue_client, queue_name, drivers, monkeypatch, read_while_claimed
):
    """A `get` of a redelivery (through its timer): its earlier delivery expired long before
    the stream starts (by more than the stream's timer look-back). Given back with its old due
    time, the message's own timer lies before every later batch's timer window: the stream
    never delivers it, and its acks move the clients' timer pointer past it as well."""
    q = queue_client
    q.create_queue(queue_name)
    mid = q.put(queue_name, b"r")
    faults.set_skew(-20.0)  # the first delivery happened 20 s ago, for 1 s
    first = q.get(queue_name, visibility_timeout=1)
    faults.set_skew(0.0)
    assert first is not None and first.id == mid
    d = drivers(queue_name, consumerId="takeover-redelivery")
    race = StreamTakesOver(monkeypatch, q.conn, d, "consumer.before_claim", read_while_claimed)
    with pytest.raises(QueueBusyError):
        q.get(queue_name, visibility_timeout=VT)
    monkeypatch.undo()
    if read_while_claimed:
        assert race.read_in_window == []
    race.finish()
    total = d.delivered + _client_deliveries(q, queue_name)
    assert total == Counter({mid: 1}), f"stream {d.delivered}, clients {total - d.delivered}"
    st = q.stats(queue_name)
    assert st["backlog"] == 0 and st["in_flight"] == 0


def test_a_get_many_whose_give_back_meets_an_expired_row_gives_back_the_others_one_by_one(
    queue_client, queue_name, drivers, monkeypatch
):
    """One row of the claimed stretch expires (its TTL runs out) before the give-back: the
    give-back's conditional batch (every row still at the claim's version) does not apply,
    and the rows are given back one compare-and-set each; the live ones go to the stream
    once, the expired one to nobody."""
    q = queue_client
    q.create_queue(queue_name, message_ttl=6)
    old = q.put(queue_name, b"old")
    # Cells written later carry the rest of the TTL rounded up to a second: the claim's
    # version cell outlives the payload by up to 1 s.
    expired_at = time.time() + 6 + 1 + 0.3
    time.sleep(3.5)
    young = q.put_many(queue_name, [b"young"] * 2)  # 2 s to spare after the old one expired

    def old_expires():
        time.sleep(max(0.0, expired_at - time.time()))

    d = drivers(queue_name, consumerId="takeover-expired")
    race = StreamTakesOver(
        monkeypatch, q.conn, d, "batch.before_claim", False, in_window=old_expires
    )
    with pytest.raises(QueueBusyError):
        q.get_many(queue_name, 3, visibility_timeout=VT)
    monkeypatch.undo()
    # The claim, the batch that did not apply, one each; and since the test held the
    # give-back past its due time's deadline, the give-back made again (the same steps).
    assert race.cas_calls in (1 + 1 + 3, 1 + 2 * (1 + 3))
    race.finish()
    total = d.delivered + _client_deliveries(q, queue_name)
    assert total == Counter(dict.fromkeys(young, 1)), f"old {old}: stream {d.delivered}"
