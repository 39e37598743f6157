"""Small records that a replayed write must find as its first attempt left them, kept in the
``reservation_keys`` table beside the replay keys (same 14-day TTL, so a record lives exactly
as long as the keys whose replay it guards). A text record (:func:`first_text`) lives in
``stream_reads``, whose rows carry text and expire after the same 14 days.

A record is two bigints under ``(owner, key)``. ``owner`` is a queue's id for a record about
that queue, or one of the fixed owners below for a record that belongs to no single queue (the
queues of a routed write, the target of a streaming query): their ids are no queue's (queue ids
are random UUIDs, version 4; these are version 5), and nothing scans the table by ``owner``.

:func:`first` is a compare-and-set: the first writer's values win and every later caller gets
them back, so attempts of one write agree on one record whatever order they run in.
"""

from __future__ import annotations

import uuid

from ...errors import ContentionError
from ..store.session import Connection

CLAIM_ATTEMPTS = 5  # tries of a record's compare-and-set whose outcome reads as "nobody"

# The owner of the destination records of routed writes (see ``routed_write.py``).
ROUTES = uuid.uuid5(uuid.NAMESPACE_URL, "cassieq:routed-write-destinations")
# The owner of streaming sinks' target records, keyed by query id (see ``spark/sink_target.py``).
TARGETS = uuid.uuid5(uuid.NAMESPACE_URL, "cassieq:stream-sink-targets")

# The owner of the dead-letter routes a batch's dead_letter() used (see ``spark/dead_letter.py``).
DEAD_LETTER_ROUTES = uuid.uuid5(uuid.NAMESPACE_URL, "cassieq:dead-letter-routes")

_READ = "SELECT lo, hi FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?"


def read(conn: Connection, owner: uuid.UUID, key: str) -> tuple[int, int] | None:
    row = conn.execute(_READ, (owner, key)).one()
    return None if row is None else (row.lo, row.hi)


def first(conn: Connection, owner: uuid.UUID, key: str, lo: int, hi: int) -> tuple[int, int]:
    """Record ``(lo, hi)`` under ``key`` unless a record is there; returns the one that holds."""
    for _ in range(CLAIM_ATTEMPTS):
        cas = conn.cas(
            "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?) "
            "IF NOT EXISTS",
            (owner, key, lo, hi),
            read=_READ,
            read_params=(owner, key),
            applied=lambda row: row is not None and (row.lo, row.hi) == (lo, hi),
        )
        if cas.was_applied:
            return lo, hi
        row = cas.row
        if row is not None:
            return row.lo, row.hi
        # Settled by a read that found nothing (the round timed out): nobody holds the key.
    raise ContentionError(
        f"record {key!r}: its compare-and-set stayed unsettled in {CLAIM_ATTEMPTS} tries; "
        "Cassandra is overloaded or partitioned: retry"
    )


def put(conn: Connection, owner: uuid.UUID, key: str, lo: int, hi: int) -> None:
    """Overwrite the record (a caller told to accept a change)."""
    conn.execute(
        "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?)",
        (owner, key, lo, hi),
    )


def uuid_halves(u: uuid.UUID) -> tuple[int, int]:
    """A UUID as two signed 64-bit integers (a record's ``lo`` and ``hi``)."""
    hi, lo = divmod(u.int, 1 << 64)
    return _signed(hi), _signed(lo)


def uuid_of(halves: tuple[int, int]) -> uuid.UUID:
    hi, lo = (h & ((1 << 64) - 1) for h in halves)
    return uuid.UUID(int=(hi << 64) | lo)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def first_text(conn: Connection, owner: uuid.UUID, key: str, text: str) -> str:
    """Record ``text`` under ``key`` unless a text is there; returns the one that holds.

    One ``stream_reads`` partition per key: an empty marker row and the text as a row of its
    own, inserted by one conditional batch on the marker, so only the first writer's text is
    ever there."""
    batch = (
        "BEGIN BATCH "
        "INSERT INTO {ks}.stream_reads (queue_id, part, run) VALUES (?, ?, '') IF NOT EXISTS "
        "INSERT INTO {ks}.stream_reads (queue_id, part, run) VALUES (?, ?, ?) "
        "APPLY BATCH"
    )
    read = "SELECT run FROM {ks}.stream_reads WHERE queue_id = ? AND part = ? AND run = ''"
    conn.cas(
        batch,
        (owner, key, owner, key, text),
        read=read,
        read_params=(owner, key),
        applied=lambda row: row is not None,
    )
    rows = conn.execute(
        "SELECT run FROM {ks}.stream_reads WHERE queue_id = ? AND part = ?", (owner, key)
    ).all()
    texts = [r.run for r in rows if r.run]
    if len(texts) != 1:  # never, but an unreadable record must not route anything
        raise RuntimeError(f"record {key!r}: {len(texts)} texts under one marker")
    return texts[0]
