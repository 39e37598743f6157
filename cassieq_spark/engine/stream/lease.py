"""The consumer lease of a streaming query, as a fence, and the clock it is measured by.

One streaming query consumes a queue at a time. Its run holds the lease: ``lease_owner`` in
the queue's pointers row (``stream:<consumerId>``) and ``lease_until``, the expiry it wrote
last. The pair is the run's *fencing token*:

* every move of the reader or invisibility pointer by the run is a compare-and-set conditioned
  on owner and token, and the plain ``acked = true`` writes of a batch follow a renewal that is
  conditioned the same way, so a run that lost the lease (it lapsed and another query took
  it, or a later run of the same consumer took over) acks nothing more and fails with
  :class:`~cassieq_spark.errors.QueueBusyError`;
* renewals only extend a lease the run holds; they never take a free one, so a renewal that
  races with :meth:`Lease.release` cannot take the lease back.

Times are Cassandra's (:class:`ClusterClock`), not the driver's: a driver whose wall clock runs
ahead could otherwise write a lease that blocks clients for as long as its clock is off, and
offsets that deliver delayed messages early.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import deque

from ...errors import QueueBusyError
from ..core import pointers
from ..core.clock import from_epoch, to_epoch
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection

log = logging.getLogger(__name__)

# Reads of Cassandra's clock are spaced at least this far apart (per process and clock).
CLOCK_REFRESH_SECONDS = 1.0
# A renewal that did not apply while the lease is still this run's is sent again this often.
RENEW_ATTEMPTS = 5
RENEWALS_REMEMBERED = 32


class ClusterClock:
    """Cassandra's wall clock as seen from here, epoch seconds.

    Read from the cluster (``now()`` of the coordinator) at most once per
    ``CLOCK_REFRESH_SECONDS`` and carried forward meanwhile with this process's monotonic
    clock, so neither a skewed nor a stepped driver clock moves it. Never goes backwards.
    """

    def __init__(self, conn: Connection):
        self._conn = conn
        self._offset: float | None = None
        self._read_at = 0.0
        self._last = 0.0
        self._lock = threading.Lock()

    def refresh(self) -> float:
        sent = time.monotonic()
        row = self._conn.execute("SELECT toUnixTimestamp(now()) AS now FROM system.local").one()
        back = time.monotonic()
        with self._lock:
            # The coordinator read its clock somewhere in the round trip: take the middle.
            self._offset = row.now / 1000.0 - (sent + back) / 2
            self._read_at = back
        return self.now()

    def now(self) -> float:
        if self._offset is None or time.monotonic() - self._read_at > CLOCK_REFRESH_SECONDS:
            try:
                return self.refresh()
            except Exception:
                if self._offset is None:
                    raise
                log.warning("reading Cassandra's clock failed; carrying on with the last reading")
        with self._lock:
            self._last = max(self._last, time.monotonic() + self._offset)
            return self._last

    def now_ms(self) -> int:
        return int(self.now() * 1000)


class Lease:
    """The lease of one run of a streaming consumer on one queue incarnation."""

    def __init__(
        self, conn: Connection, queue: QueueInfo, owner: str, timeout: float, clock: ClusterClock
    ):
        self.conn = conn
        self.queue = queue
        self.owner = owner
        self.timeout = timeout
        self.clock = clock
        self.token: dt.datetime | None = None  # lease_until as last written by this run
        # Every lease_until this run sent in a renewal: one whose reply was lost, or that a
        # later Paxos round completed after the settle read said "not applied", is still ours.
        self._sent: deque[dt.datetime] = deque(maxlen=RENEWALS_REMEMBERED)
        self.lost: pointers.Pointers | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- holding it -------------------------------------------------------------------------------

    def ensure(self) -> None:
        """Hold the lease for at least two thirds of its timeout from now: take it (waiting for
        another holder's lease to lapse) or renew it. QueueBusyError when it was lost."""
        with self._lock:
            if self.lost is not None:
                raise self.busy(self.lost)
            now = self.clock.now()
            if self.token is None:
                self._take(now)
            elif to_epoch(self.token) - now <= self.timeout * 2 / 3:
                self.renew()
        if self._renewer is None and not self._stop.is_set():
            self._renewer = threading.Thread(
                target=self._renew_loop, name="cassieq-lease", daemon=True
            )
            self._renewer.start()

    def _take(self, now: float) -> None:
        self._warn_live_twin(pointers.read(self.conn, self.queue), now)
        until = pointers.lease_time(now + self.timeout)
        p = pointers.acquire_lease(self.conn, self.queue, self.owner, until, now)
        if not self._is_mine(p, until):
            p, until = self._wait(p)
        self.token = until

    def _warn_live_twin(self, seen: pointers.Pointers, now: float) -> None:
        """A run takes over its own consumer's lease at once (a restart needs no wait). When
        that lease was renewed within the last third of its timeout, the earlier run was most
        likely alive, renewing: another query may use the same ``consumerId``, and the two
        would take the lease from each other in turn, each leaving its batch in flight."""
        if seen.lease_owner == self.owner and seen.lease_until - now > self.timeout * 2 / 3:
            log.warning(
                "queue %s: took over the consumer lease of %s, renewed %.1f s ago by a run that "
                "may still be alive. If another streaming query uses the same consumerId, give "
                "each query its own (option consumerId): otherwise they take the lease from "
                "each other and fail in turn",
                self.queue.name,
                self.owner,
                max(0.0, now - (seen.lease_until - self.timeout)),
            )

    def held_by_other(self) -> str | None:
        """Who else holds this queue's lease now (their owner name), or None: free, lapsed,
        or this consumer's own."""
        p = pointers.read(self.conn, self.queue)
        if p.lease_held(self.clock.now()) and p.lease_owner != self.owner:
            return p.lease_owner
        return None

    def _wait(self, seen: pointers.Pointers) -> tuple[pointers.Pointers, dt.datetime]:
        """Another owner holds the lease: take it once it lapses; fail if it is still held
        after two lease periods. A stopped query's reader process can renew once more before
        Spark kills it, so one renewal alone does not prove a live holder."""
        period = max(self.timeout, seen.lease_until - self.clock.now())
        deadline = self.clock.now() + 2 * period + 2.0
        log.info(
            "queue %s: lease held by %s until %s; waiting for it to lapse",
            self.queue.name,
            seen.lease_owner,
            pointers.lease_expiry(seen),
        )
        while True:
            time.sleep(min(1.0, max(0.1, seen.lease_until - self.clock.now() + 0.1)))
            now = self.clock.now()
            until = pointers.lease_time(now + self.timeout)
            p = pointers.acquire_lease(self.conn, self.queue, self.owner, until, now)
            if self._is_mine(p, until):
                log.info("queue %s: took the consumer lease as %s", self.queue.name, self.owner)
                return p, until
            if now > deadline:
                raise self.busy(p)
            seen = p

    def _is_mine(self, p: pointers.Pointers, until: dt.datetime) -> bool:
        return p.lease_owner == self.owner and p.lease_token == until

    def _holds(self, p: pointers.Pointers) -> bool:
        """The row still shows this run: our owner with the token we hold, or with a token one
        of our renewals wrote although we were told (or settled) that it had not applied."""
        if p.lease_owner != self.owner or p.lease_token is None:
            return False
        return p.lease_token == self.token or p.lease_token in self._sent

    def _adopt(self, p: pointers.Pointers, why: str) -> None:
        if p.lease_token != self.token:
            log.info(
                "queue %s: %s, but the lease is still this run's (a renewal of ours applied "
                "late); carrying on with it",
                self.queue.name,
                why,
            )
            self.token = p.lease_token

    def renew(self) -> None:
        """Extend the lease now; QueueBusyError when this run no longer holds it. Also the
        fence before writes that are not compare-and-sets of their own."""
        with self._lock:
            if self.lost is not None:
                raise self.busy(self.lost)
            if self.token is None:
                raise RuntimeError("renew() before the lease was taken")
            first = self.token
            for _ in range(RENEW_ATTEMPTS):
                now = self.clock.now()
                until = pointers.lease_time(now + self.timeout)
                self._sent.append(until)
                faults.point("lease.before_renew", lease=self, until=until)
                if pointers.renew_lease(self.conn, self.queue, self.owner, self.token, until):
                    break
                # Not applied: either another run took the lease, or the condition met a token
                # of ours it did not expect (a renewal whose outcome was unknown applied after
                # all, as a later Paxos round completed it). Only the first loses the lease.
                seen = pointers.read(self.conn, self.queue)
                if not self._holds(seen):
                    self._lose(seen)
                self._adopt(seen, "a renewal did not apply")
            else:
                self._lose(pointers.read(self.conn, self.queue))
            lapsed = now - to_epoch(first)
            if lapsed > 0:
                log.warning(
                    "queue %s: the consumer lease had lapsed for %.1f s before this renewal "
                    "(Cassandra slow or this process paused): clients may have received "
                    "messages of the batch in progress meanwhile",
                    self.queue.name,
                    lapsed,
                )
            self.token = until

    def advance(self, pointer: str, to: int) -> bool:
        """Move a pointer forward, fenced by this run's lease. False when it is already there."""
        with self._lock:
            if self.lost is not None:
                raise self.busy(self.lost)
            if self.token is None:
                raise RuntimeError("advance() before the lease was taken")
            for _ in range(RENEW_ATTEMPTS):
                moved, seen = pointers.advance_fenced(
                    self.conn, self.queue, pointer, to, self.owner, self.token
                )
                if moved or seen is None or self._is_mine(seen, self.token):
                    return moved
                if not self._holds(seen):
                    self._lose(seen)
                self._adopt(seen, f"moving the {pointer} pointer met another token")
            self._lose(pointers.read(self.conn, self.queue))
            return False

    def _lose(self, seen: pointers.Pointers) -> None:
        self.lost = seen
        log.error(
            "queue %s: this run lost the consumer lease (now %s until %s); it acks nothing more",
            self.queue.name,
            seen.lease_owner,
            pointers.lease_expiry(seen),
        )
        raise self.busy(seen)

    def busy(self, p: pointers.Pointers) -> QueueBusyError:
        holder = (p.lease_owner or "nobody").removeprefix("stream:")
        until = pointers.lease_expiry(p)
        if p.lease_owner == self.owner:
            what = (
                f"another run of this query (consumerId {holder!r}) took over its lease on queue "
                f"{self.queue.name!r}; only the latest run may consume it, this one stops"
            )
        elif self.token is not None:
            what = (
                f"this query lost its lease on queue {self.queue.name!r} (it lapsed while "
                f"Cassandra or this driver was slow) and it is now held by {holder!r}; restart "
                "the query once that consumer has stopped"
            )
        else:
            what = (
                f"queue {self.queue.name!r} is consumed by streaming query {holder!r} (its lease "
                f"runs until {until.isoformat() if until else '?'}Z and is being renewed)"
            )
        return QueueBusyError(
            f"{what}; only one streaming query may consume a queue: stop the other one first, "
            "or restart this one with the same option consumerId to take over at once"
        )

    # -- the renewer ------------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        # Keeps the lease while a long batch runs (latestOffset is not called meanwhile).
        interval = self.timeout / 3
        while not self._stop.wait(interval):
            try:
                with self._lock:
                    if self._stop.is_set():
                        return  # released meanwhile: a renewal now would fail anyway
                    self.renew()
            except QueueBusyError:
                return  # recorded in self.lost: the next call of the query fails with it
            except Exception:  # a timeout now and then; the next round or ensure() retries
                log.warning("renewing the consumer lease failed", exc_info=True)

    def release(self) -> None:
        """Give the lease back. The renewer is stopped first, so it cannot renew afterwards."""
        self._stop.set()
        renewer = self._renewer
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(timeout=min(self.timeout, 5.0))
        with self._lock:
            if self.token is None or self.lost is not None:
                return
            try:
                pointers.release_lease(self.conn, self.queue, self.owner, self.token)
            except Exception:
                log.warning("releasing the consumer lease failed", exc_info=True)
            self.token = None


def stream_busy(queue: QueueInfo, ptrs: pointers.Pointers, now: float) -> QueueBusyError | None:
    """The error a client gets while a streaming query holds the lease, or None when none does.

    Clients and a stream never consume one queue at once: the stream acks by moving the reader
    pointer, which would pass rows a client holds.
    """
    if ptrs.lease_held(now) and (ptrs.lease_owner or "").startswith("stream:"):
        return QueueBusyError(
            f"queue {queue.name!r} is consumed by streaming query {(ptrs.lease_owner or '')[7:]!r} until "
            f"{from_epoch(ptrs.lease_until).isoformat()}Z; stop that query (its lease then expires) "
            "or consume another queue"
        )
    return None
