"""A keyed write whose rows name their own queues (the sink's ``queue`` column, as Kafka's
``topic`` column): one :class:`~.keyed_write.KeyedWrite` per destination.

Every destination's write uses the same key prefix: reservation keys are stored per queue
(``reservation_keys`` is keyed by ``queue_id``), so a replay of the same writer finds each
destination's blocks under the same keys, and a row routed to the default queue is keyed
exactly as an unrouted write would key it. Each destination gets the rows routed to it in
input order, so a replay with the same input cuts the same chunks per queue.

A replay that routes rows to other queues than its first attempt did would go unnoticed by
the keys alone: a queue only the replay writes has free keys (its rows are written again), a
queue only the first attempt wrote is never looked at. So, before it closes any block, the
write records which queues it writes (their incarnations; ``records.first`` under the key
prefix, kept as long as the keys) and a replay that writes another set fails with
``ReplayMismatchError`` (or, with ``rewrite_mismatch``, records its own set and goes on). A
first attempt that died before this record leaves its open blocks to repair in any queue the
replay no longer names.

Destinations are resolved (looked up, or created with ``create``) for every distinct name of a
slice before any row of that slice is buffered: a slice naming an unknown queue fails before
its rows reach any queue. Earlier slices may already have flushed full chunks; those belong to
blocks this attempt reserved, and the failure rolls them back (``KeyedWrite.rollback``).
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ...errors import QueueNotFoundError, ReplayMismatchError
from ..core import queues
from ..core.queues import QueueInfo
from ..store.session import Connection
from . import records
from .keyed_write import KeyedWrite, Slice, WriteReport, pull_slices

log = logging.getLogger(__name__)


@dataclass
class RoutedReport(WriteReport):
    """A :class:`WriteReport` summed over destinations, with each one's (written, replayed)."""

    queues: dict[str, tuple[int, int]] = field(default_factory=dict)


class QueueResolver:
    """Queue names to :class:`QueueInfo`, looked up once per writer; missing queues are created
    with ``settings`` when ``create`` is set, otherwise they fail with ``QueueNotFoundError``.
    An existing queue whose settings named in ``compare`` differ from ``settings`` fails with
    ``QueueSettingsMismatchError`` (None: compare none of them)."""

    def __init__(
        self,
        conn: Connection,
        *,
        create: bool = False,
        settings: dict | None = None,
        known: Iterable[QueueInfo] = (),
        compare: Iterable[str] | None = None,
    ):
        self.conn = conn
        self.compare = tuple(compare or ())
        self.create = create
        self.settings = dict(settings or {})
        self.infos: dict[str, QueueInfo] = {q.name: q for q in known}

    def resolve(self, name: str) -> QueueInfo:
        info = self.infos.get(name)
        if info is not None:
            return info
        if self.create:
            settings = dict(self.settings)
            compare = self.compare
            if settings.get("dead_letter_queue") == name:
                settings["dead_letter_queue"] = None  # the default queue's DLQ, not its own
                compare = tuple(c for c in compare if c != "dead_letter_queue")
            info = queues.create_queue(self.conn, name, exist_ok=True, compare=compare, **settings)
            log.info("routed write: queue %r ready (createQueue=true)", name)
        else:
            try:
                info = queues.get_queue(self.conn, name)
            except QueueNotFoundError:
                raise QueueNotFoundError(
                    f"queue {name!r} does not exist in keyspace {self.conn.keyspace!r}; create "
                    f"it (cassieq create-queue {name}) or set option createQueue=true"
                ) from None
        self.infos[name] = info
        return info


class RoutedWrite:
    """One attempt of a writer whose rows go to several queues; ``make`` builds the keyed write
    of one destination (same key prefix for all). Feed with :meth:`add` (or :meth:`add_slice`)
    after :meth:`resolve` named every destination of the rows, then :meth:`finish`; or let
    :meth:`run` pull the slices and do both."""

    def __init__(
        self,
        resolver: QueueResolver,
        make: Callable[[QueueInfo], KeyedWrite],
        *,
        partition: int = 0,
        key_prefix: str | None = None,
        what: str = "routed write",
        rewrite_mismatch: bool = False,
        mismatch_hint: str = "",
    ):
        self.resolver = resolver
        self.make = make
        self.partition = partition
        # the destination record's key (None: no record, a write no replay looks for)
        self.key_prefix = key_prefix
        self.what = what
        self.rewrite_mismatch = rewrite_mismatch
        self.mismatch_hint = mismatch_hint
        self.position = 0  # rows seen so far, over all destinations
        self.writes: dict[str, KeyedWrite] = {}

    def resolve(self, names: Iterable[str]) -> dict[str, QueueInfo]:
        """Every distinct name's queue; raises before any of them gets a row."""
        return {n: self.resolver.resolve(n) for n in dict.fromkeys(names)}

    def add(
        self,
        dests: list[str],
        payloads: list[bytes],
        headers: list[dict | None] | None,
        delays: list[float] | None,
        sizes: list[int],
        dedup_ids: list[str | None] | None = None,
    ) -> None:
        """Buffer rows, ``dests[i]`` being row i's queue (already resolved)."""
        groups: dict[str, list[int]] = {}
        for i, d in enumerate(dests):
            groups.setdefault(d, []).append(i)
        self.position += len(payloads)
        for name, idx in groups.items():
            w = self.writes.get(name)
            if w is None:
                w = self.writes[name] = self.make(self.resolver.resolve(name))
            w.add(
                [payloads[i] for i in idx],
                None if headers is None else [headers[i] for i in idx],
                None if delays is None else [delays[i] for i in idx],
                [sizes[i] for i in idx],
                None if dedup_ids is None else [dedup_ids[i] for i in idx],
            )

    def add_slice(self, rows: Slice) -> None:
        """:meth:`add` a slice whose rows name their queues (``dests``, already resolved)."""
        if rows.dests is None:
            raise ValueError(
                "a routed write needs each row's queue, but the slice has no dests; write a "
                "slice of one queue with a KeyedWrite"
            )
        self.add(rows.dests, rows.payloads, rows.headers, rows.delays, rows.sizes, rows.dedup_ids)

    def check_destinations(self) -> None:
        """Record the queues this attempt writes, or fail if an earlier attempt of the same
        write recorded others (see the module's docstring). Called before any block closes."""
        if self.key_prefix is None:
            return
        conn = self.resolver.conn
        ids = sorted(str(self.resolver.resolve(n).queue_id) for n in self.writes)
        digest = hashlib.blake2b("\n".join(ids).encode(), digest_size=8).digest()
        want = (struct.unpack(">q", digest)[0], len(ids))
        key = f"routes:{self.key_prefix}"
        if ids:
            got = records.first(conn, records.ROUTES, key, *want)
        else:  # nothing to write: an earlier attempt that wrote rows is still a mismatch
            got = records.read(conn, records.ROUTES, key) or want
        if got == want:
            return
        names = ", ".join(sorted(self.writes)) or "no queue"
        text = (
            f"{self.what}, partition {self.partition}: this attempt routes its rows to {names} "
            f"({len(ids)} queues), an earlier attempt of the same write routed them to "
            f"{got[1]} queues that are not these (the queue column's values changed, e.g. a "
            "routing table or a dead-letter setting, or a queue was deleted and created again)"
        )
        if not self.rewrite_mismatch:
            raise ReplayMismatchError(f"{text}. {self.mismatch_hint}".rstrip())
        log.warning("%s; writing them again (replayMismatch=writeAgain)", text)
        records.put(conn, records.ROUTES, key, *want)

    def finish(self) -> RoutedReport:
        self.check_destinations()
        per: dict[str, tuple[int, int]] = {}
        ranges: list[tuple[int, int]] = []
        for name in sorted(self.writes):  # a fixed order: a retry meets the same failures
            r = self.writes[name].finish()
            per[name] = (r.written, r.replayed)
            ranges.extend(r.blocks)
        return RoutedReport(
            self.partition,
            sum(w for w, _ in per.values()),
            sum(r for _, r in per.values()),
            tuple(sorted(ranges)),
            per,
        )

    def rollback(self) -> None:
        for w in self.writes.values():
            w.rollback()

    def run(self, slices: Iterable[Slice]) -> RoutedReport:
        """:func:`pull_slices` into this write: anything that fails rolls back every
        destination's write."""
        return pull_slices(self, slices)
