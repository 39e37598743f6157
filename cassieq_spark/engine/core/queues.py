"""The queue registry: settings of each queue and its current incarnation."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ... import validate
from ...config import (
    MAX_MESSAGE_TTL_SECONDS,
    repair_timeout_seconds,
    validate_queue_name,
    visibility_seconds,
)
from ...errors import (
    ConfigError,
    ContentionError,
    QueueExistsError,
    QueueNotFoundError,
    QueueSettingsMismatchError,
)
from ..store import faults
from ..store.schema import SENTINEL_LO
from ..store.session import Connection
from .buckets import DEFAULT_BUCKET_SIZE, split_by_bucket, validate_bucket_size
from .receipts import new_receipt_key

log = logging.getLogger(__name__)

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# A message is one mutation: Cassandra refuses mutations above half its commit log segment
# (16 MiB by default) and v4 frames above 16 MiB. Payload plus headers
# (messages.MAX_HEADERS_BYTES) plus the row's other cells stay below both.
MAX_PAYLOAD_LIMIT = 15 * 1024 * 1024
CREATE_ATTEMPTS = 3  # writes of the queue row that timed out before they ran
UPDATE_ATTEMPTS = 5  # updates of the settings that lost to a concurrent update
KEY_ATTEMPTS = 3  # reads of a queue whose row had no receipt key yet


@dataclass(frozen=True)
class QueueSettings:
    """What a queue is created with: the one place the defaults are written. The client, the
    command line, the Spark options and the HTTP service take their defaults from
    :data:`DEFAULT_SETTINGS`."""

    bucket_size: int = DEFAULT_BUCKET_SIZE
    max_delivery_count: int = 5
    visibility_timeout: float = 30.0
    repair_timeout: float = 15.0
    dead_letter_queue: str | None = None
    message_ttl: int | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES


DEFAULT_SETTINGS = QueueSettings()
SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(QueueSettings))

# What update_queue may change. The bucket size never changes: it maps every stored id to its
# partition. The repair timeout stays what the queue's readers and writers agreed on.
UPDATABLE_SETTINGS: tuple[str, ...] = (
    "visibility_timeout",
    "max_delivery_count",
    "dead_letter_queue",
    "message_ttl",
    "max_payload_bytes",
)


@dataclass(frozen=True)
class QueueInfo:
    """A queue's settings. ``queue_id`` names the incarnation (new after delete + create)."""

    name: str
    queue_id: uuid.UUID
    bucket_size: int = DEFAULT_SETTINGS.bucket_size
    max_delivery_count: int = DEFAULT_SETTINGS.max_delivery_count
    visibility_timeout: float = DEFAULT_SETTINGS.visibility_timeout
    repair_timeout: float = DEFAULT_SETTINGS.repair_timeout
    dead_letter_queue: str | None = None
    message_ttl: int | None = None
    max_payload_bytes: int = DEFAULT_SETTINGS.max_payload_bytes
    created_at: dt.datetime | None = None
    # How many times update_queue changed the settings (0: never), and when it last did.
    settings_version: int = 0
    updated_at: dt.datetime | None = None
    # The key of the tags of this incarnation's pop receipts (receipts.py): never printed.
    receipt_key: bytes | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        d = asdict(self)
        del d["receipt_key"]
        d["queue_id"] = str(self.queue_id)
        d["created_at"] = self.created_at.isoformat() if self.created_at else None
        d["updated_at"] = self.updated_at.isoformat() if self.updated_at else None
        return d

    def settings(self) -> dict[str, Any]:
        """The queue's settings by name (the fields of :class:`QueueSettings`)."""
        return {name: getattr(self, name) for name in SETTING_NAMES}

    @property
    def ttl(self) -> int:
        """TTL in seconds for message rows (0 = none)."""
        return int(self.message_ttl or 0)


def validate_settings(
    *,
    bucket_size: int,
    max_delivery_count: int,
    visibility_timeout: float,
    repair_timeout: float,
    dead_letter_queue: str | None,
    message_ttl: int | None,
    max_payload_bytes: int,
    name: str,
) -> dict:
    validate_bucket_size(bucket_size)
    validate.count(max_delivery_count, "max delivery count", 1, validate.MAX_DELIVERY_COUNT)
    vt = visibility_seconds(visibility_timeout)
    rt = repair_timeout_seconds(repair_timeout)
    if dead_letter_queue is not None:
        validate_queue_name(dead_letter_queue, "dead-letter queue name")
        if dead_letter_queue == name:
            raise ConfigError("a queue cannot be its own dead-letter queue")
    if message_ttl is not None and (
        not isinstance(message_ttl, int)
        or isinstance(message_ttl, bool)
        or not 0 < message_ttl <= MAX_MESSAGE_TTL_SECONDS
    ):
        raise ConfigError(
            f"message TTL must be a whole number of seconds from 1 to {MAX_MESSAGE_TTL_SECONDS} "
            f"(20 years, Cassandra's limit), got {message_ttl!r}"
        )
    if (
        not isinstance(max_payload_bytes, int)
        or isinstance(max_payload_bytes, bool)
        or not (1 <= max_payload_bytes <= MAX_PAYLOAD_LIMIT)
    ):
        raise ConfigError(
            f"max payload bytes must be from 1 to {MAX_PAYLOAD_LIMIT}, got {max_payload_bytes!r}"
        )
    return {
        "bucket_size": bucket_size,
        "max_delivery_count": max_delivery_count,
        "visibility_timeout": vt,
        "repair_timeout": rt,
        "dead_letter_queue": dead_letter_queue,
        "message_ttl": message_ttl,
        "max_payload_bytes": max_payload_bytes,
    }


_SELECT = (
    "SELECT name, queue_id, bucket_size, max_delivery_count, visibility_timeout, repair_timeout, "
    "dead_letter_queue, message_ttl, max_payload_bytes, created_at, settings_version, updated_at, "
    "receipt_key FROM {ks}.queues"
)


def _row_to_info(row) -> QueueInfo:
    return QueueInfo(
        name=row.name,
        queue_id=row.queue_id,
        bucket_size=row.bucket_size,
        max_delivery_count=row.max_delivery_count,
        visibility_timeout=row.visibility_timeout,
        repair_timeout=row.repair_timeout,
        dead_letter_queue=row.dead_letter_queue,
        message_ttl=row.message_ttl,
        max_payload_bytes=row.max_payload_bytes or DEFAULT_MAX_PAYLOAD_BYTES,
        created_at=row.created_at,
        settings_version=row.settings_version or 0,
        updated_at=row.updated_at,
        receipt_key=row.receipt_key,
    )


def settings_differences(
    info: QueueInfo, settings: dict[str, Any], names: Collection[str]
) -> dict[str, tuple[Any, Any]]:
    """The settings among ``names`` whose checked value in ``settings`` (as from
    :func:`validate_settings`) is not the queue's: ``{name: (queue's value, asked value)}``."""
    have = info.settings()
    return {
        n: (have[n], settings[n]) for n in SETTING_NAMES if n in names and have[n] != settings[n]
    }


def _mismatch(name: str, differ: dict[str, tuple[Any, Any]]) -> QueueSettingsMismatchError:
    listed = ", ".join(f"{k} {have!r} (asked {want!r})" for k, (have, want) in differ.items())
    return QueueSettingsMismatchError(
        f"queue {name!r} already exists with other settings: {listed}; use another name, leave "
        "those settings out to use the queue as it is, change them with update_queue "
        f"(cassieq update-queue {name}), or delete and create it again",
        differ,
    )


def _check_dead_letter_chain(conn: Connection, name: str, dlq: str) -> None:
    """The dead-letter queue must exist, and following dead-letter queues from it must not
    come back to ``name`` (a delete and re-create can close a cycle: poison messages would
    go round it instead of stopping)."""
    seen = [name]
    current: str | None = dlq
    while current is not None:
        if current in seen:
            raise ConfigError(
                f"dead-letter queue {dlq!r} of queue {name!r} would form a cycle "
                f"({' -> '.join([*seen, current])}); a dead-letter chain must end in a queue "
                "without a dead-letter queue"
            )
        try:
            info = get_queue(conn, current)
        except QueueNotFoundError:
            if current != dlq:
                return  # the chain ends at a deleted queue: no cycle through it
            raise QueueNotFoundError(
                f"dead-letter queue {dlq!r} of queue {name!r} does not exist; "
                f"create it first (cassieq create-queue {dlq})"
            ) from None
        seen.append(current)
        current = info.dead_letter_queue


def _serial_chain(conn: Connection, name: str) -> list[str]:
    """The dead-letter chain from ``name`` (``name`` first), read at the serial level so that
    every compare-and-set that completed before this read is in it; it stops at a queue
    without a dead-letter queue, a deleted one, or the first queue seen twice (a cycle)."""
    chain = [name]
    while True:
        row = conn.read_serial(
            "SELECT queue_id, dead_letter_queue FROM {ks}.queues WHERE name = ?", (chain[-1],)
        )
        nxt = None if row is None or row.queue_id is None else row.dead_letter_queue
        if nxt is None:
            return chain
        chain.append(nxt)
        if nxt in chain[:-1]:
            return chain


def _undo_if_cycle(conn: Connection, info: QueueInfo, dlq: str, version: int) -> None:
    """After ``update_queue`` set ``dlq`` as the dead-letter queue of ``info.name`` at settings
    ``version``: if another update that ran at the same time closed a cycle through it (each
    checked the chain before the other's change was written: ``a -> b`` and ``b -> a``), put
    the previous dead-letter queue back and refuse. The cycle check reads at the serial level
    after this compare-and-set, so of two updates that close a cycle, the later to apply sees
    the earlier's change: at least one of them undoes itself (both may), and no cycle stays."""
    name = info.name
    chain = _serial_chain(conn, name)
    if chain[-1] != name or len(chain) < 2:
        return
    res = conn.cas(
        "UPDATE {ks}.queues SET dead_letter_queue = ?, settings_version = ?, "
        "updated_at = toTimestamp(now()) WHERE name = ? IF queue_id = ? AND settings_version = ?",
        (info.dead_letter_queue, version + 1, name, info.queue_id, version),
        read="SELECT queue_id, settings_version FROM {ks}.queues WHERE name = ?",
        read_params=(name,),
        applied=_updated_to(info.queue_id, version + 1),
    )
    undone = (
        "the previous one is back"
        if res.was_applied
        else "the queue's settings changed again since: check them"
    )
    raise ConfigError(
        f"dead-letter queue {dlq!r} of queue {name!r} formed a cycle ({' -> '.join(chain)}) "
        f"with another dead-letter change made at the same time; {undone}. A dead-letter chain "
        "must end in a queue without a dead-letter queue: change one queue at a time"
    )


def create_queue(
    conn: Connection,
    name: str,
    *,
    exist_ok: bool = False,
    compare: Collection[str] | None = None,
    **settings,
) -> QueueInfo:
    """Create queue ``name`` with ``settings`` (the fields of :class:`QueueSettings`).

    ``exist_ok``: an existing queue is returned, provided the settings named in ``compare``
    (None: all of them) are its own; a setting that differs raises
    :class:`QueueSettingsMismatchError` naming each one. Callers compare what their user asked
    for explicitly, so a setting left out never refuses a queue made with another value."""
    validate_queue_name(name)
    s = validate_settings(name=name, **settings)
    names = SETTING_NAMES if compare is None else compare
    if exist_ok:
        # An existing queue is used as it is: one read, no compare-and-set, no rows written
        # for an incarnation that would lose it (a sink with createQueue=true asks for its
        # queue on every micro-batch and routed task).
        try:
            info = get_queue(conn, name)
        except QueueNotFoundError:
            pass
        else:
            differ = settings_differences(info, s, names)
            if differ:
                raise _mismatch(name, differ)
            return info
    if s["dead_letter_queue"]:
        # A dead-letter queue that does not exist would fail the first message that needs it;
        # the delete of a referenced queue is caught at dead-letter time.
        _check_dead_letter_chain(conn, name, s["dead_letter_queue"])
    qid = uuid.uuid4()
    # The incarnation's pointers and counter go in first: until the queue row below names
    # `qid` nobody can reach them, so a crash in between leaves unreachable rows, never a
    # queue without them. Stamped with timestamp 1, they lose to any later
    # write, compare-and-sets included, whatever the creator's clock says. The
    # invisibility pointer starts at slot 0: the first consumer moves it to its own "now".
    init = conn.execute_async(
        "INSERT INTO {ks}.pointers (queue_id, reader, repair, timer_slot) VALUES (?, 0, 0, 0) "
        "USING TIMESTAMP 1",
        (qid,),
    )
    conn.execute(
        "INSERT INTO {ks}.monoton (queue_id, lo, next) VALUES (?, ?, 0) USING TIMESTAMP 1",
        (qid, SENTINEL_LO),
    )
    init.result()
    faults.point("queues.before_queue_row", qid=qid)
    for _attempt in range(CREATE_ATTEMPTS):
        res = conn.cas(
            "INSERT INTO {ks}.queues (name, queue_id, bucket_size, max_delivery_count, visibility_timeout, "
            "repair_timeout, dead_letter_queue, message_ttl, max_payload_bytes, receipt_key, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, toTimestamp(now())) IF NOT EXISTS",
            (
                name,
                qid,
                s["bucket_size"],
                s["max_delivery_count"],
                s["visibility_timeout"],
                s["repair_timeout"],
                s["dead_letter_queue"],
                s["message_ttl"],
                s["max_payload_bytes"],
                new_receipt_key(),
            ),
            read="SELECT queue_id FROM {ks}.queues WHERE name = ?",
            read_params=(name,),
            applied=lambda row: row is not None and row.queue_id == qid,
        )
        # The queue row decides, not "not applied" alone: a copy sent again after the first
        # applied finds our own row (and our incarnation's rows must then stay).
        named = getattr(res.one(), "queue_id", None)
        if res.was_applied or named == qid:
            break
        if named is None:
            continue  # it never ran (settled after a timeout): nobody holds the name yet
        # Another incarnation holds the name: ours was never reachable; drop its rows.
        for table in ("pointers", "monoton"):
            conn.execute_async(f"DELETE FROM {{ks}}.{table} WHERE queue_id = ?", (qid,))
        if exist_ok:
            info = get_queue(conn, name)
            differ = settings_differences(info, s, names)
            if differ:
                raise _mismatch(name, differ)
            return info
        raise QueueExistsError(
            f"queue {name!r} already exists; pass exist_ok=True to use it as it is"
        )
    else:
        raise ContentionError(
            f"could not create queue {name!r}: its row was not written after "
            f"{CREATE_ATTEMPTS} attempts (Cassandra timed out); retry create_queue"
        )
    log.info("created queue %s (%s)", name, qid)
    return get_queue(conn, name)


def _keyed_with(key: bytes) -> Callable[[Any], bool]:
    """The settle predicate of a receipt key's write: the row holds ``key``."""
    return lambda row: row is not None and row.receipt_key == key


def get_queue(conn: Connection, name: str) -> QueueInfo:
    """The queue's definition, its receipt key included.

    A queue row without a key (made before receipts were signed, or by a client of that
    time) gets one here, by a compare-and-set that applies only while the row has none: every
    reader ends up with the one key that won, whichever wrote it."""
    validate_queue_name(name)
    for _attempt in range(KEY_ATTEMPTS):
        row = conn.execute(_SELECT + " WHERE name = ?", (name,)).one()
        if row is None or row.queue_id is None:
            raise QueueNotFoundError(
                f"queue {name!r} does not exist; create it first (cassieq create-queue {name})"
            )
        if row.receipt_key:
            return _row_to_info(row)
        key = new_receipt_key()
        conn.cas(
            "UPDATE {ks}.queues SET receipt_key = ? WHERE name = ? "
            "IF queue_id = ? AND receipt_key = null",
            (key, name, row.queue_id),
            read="SELECT receipt_key FROM {ks}.queues WHERE name = ?",
            read_params=(name,),
            applied=_keyed_with(key),
        )
        log.info("queue %s: receipt key made for a row that had none", name)
        # Whether ours or another reader's key won, the row is read again.
    raise ContentionError(
        f"queue {name!r} still had no receipt key after {KEY_ATTEMPTS} attempts (it is being "
        "deleted and re-created by clients older than schema version 12?); retry"
    )


class Unset:
    """The value of a setting argument that was not given: ``update_queue`` keeps the queue's
    setting, ``create_queue`` uses the default and does not compare it with an existing
    queue's."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


def _updated_to(queue_id: uuid.UUID, version: int) -> Callable[[Any], bool]:
    """The settle predicate of an update: the row is this incarnation at ``version``."""
    return lambda row: (
        row is not None and row.queue_id == queue_id and row.settings_version == version
    )


def update_queue(conn: Connection, name: str, **changes: Any) -> QueueInfo:
    """Change settings of queue ``name`` (any of :data:`UPDATABLE_SETTINGS`; a value of
    :data:`UNSET` keeps the queue's) and return the queue as updated.

    Safe while producers and consumers run: the settings are one row, and each writer and
    reader reads them (a client keeps them up to ``QUEUE_CACHE_SECONDS``) for each operation,
    so a change applies from each party's next read of the row on. What that means for
    messages already stored: a new visibility timeout applies from their next delivery (one
    in flight keeps the deadline it got); a new delivery limit or dead-letter queue is checked
    at their next delivery; a new message TTL and payload limit apply to messages put after
    the change (a stored row keeps the TTL it was written with).

    The update is a compare-and-set on the row's ``settings_version``: one that read settings
    another update changed since (a dead-letter chain checked against them) reads and checks
    again, and one that finds the queue deleted or re-created (another ``queue_id``) fails.
    A new dead-letter queue is checked against the chain before the compare-and-set and,
    since two updates of two queues (``a -> b``, ``b -> a``) can each pass that check before
    the other is written, again after it (:func:`_undo_if_cycle`): a change that closed a
    cycle is undone and refused."""
    unknown = sorted(set(changes) - set(UPDATABLE_SETTINGS))
    if unknown:
        fixed = [u for u in unknown if u in SETTING_NAMES]
        raise ConfigError(
            f"update_queue cannot change {', '.join(unknown)}: "
            + (
                f"{', '.join(fixed)} is fixed when the queue is created; "
                if fixed
                else "no such setting; "
            )
            + f"it can change {', '.join(UPDATABLE_SETTINGS)}"
        )
    wanted = {k: v for k, v in changes.items() if v is not UNSET}
    if not wanted:
        raise ConfigError(
            f"update_queue of queue {name!r} was given no setting to change; give one or more "
            f"of {', '.join(UPDATABLE_SETTINGS)}"
        )
    for _attempt in range(UPDATE_ATTEMPTS):
        info = get_queue(conn, name)
        merged = {**info.settings(), **wanted}
        s = validate_settings(name=name, **merged)
        if s["dead_letter_queue"] and s["dead_letter_queue"] != info.dead_letter_queue:
            _check_dead_letter_chain(conn, name, s["dead_letter_queue"])
            faults.point("queues.dead_letter_chain_checked", queue=name)
        version = info.settings_version + 1
        res = conn.cas(
            "UPDATE {ks}.queues SET max_delivery_count = ?, visibility_timeout = ?, "
            "dead_letter_queue = ?, message_ttl = ?, max_payload_bytes = ?, "
            "settings_version = ?, updated_at = toTimestamp(now()) "
            "WHERE name = ? IF queue_id = ? AND settings_version = ?",
            (
                s["max_delivery_count"],
                s["visibility_timeout"],
                s["dead_letter_queue"],
                s["message_ttl"],
                s["max_payload_bytes"],
                version,
                name,
                info.queue_id,
                info.settings_version or None,
            ),
            read="SELECT queue_id, settings_version FROM {ks}.queues WHERE name = ?",
            read_params=(name,),
            applied=_updated_to(info.queue_id, version),
        )
        row = res.one()
        if res.was_applied:
            log.info("queue %s: settings %s changed (version %d)", name, sorted(wanted), version)
            if s["dead_letter_queue"] and s["dead_letter_queue"] != info.dead_letter_queue:
                _undo_if_cycle(conn, info, s["dead_letter_queue"], version)
            return get_queue(conn, name)
        if row is None or getattr(row, "queue_id", None) != info.queue_id:
            raise QueueNotFoundError(
                f"queue {name!r} was deleted or re-created while its settings were being "
                "changed; nothing was changed: check the queue and update it again"
            )
        # Another update changed the settings since we read them: read and check again.
    raise ContentionError(
        f"could not update queue {name!r}: its settings kept changing under "
        f"{UPDATE_ATTEMPTS} concurrent updates; retry update_queue"
    )


def list_queues(conn: Connection) -> list[QueueInfo]:
    return sorted(
        (_row_to_info(r) for r in conn.execute(_SELECT) if r.queue_id), key=lambda q: q.name
    )


def keeps_past_delivery_limit(conn: Connection, queue: QueueInfo) -> bool:
    """A message of ``queue`` delivered ``max_delivery_count`` times stays (delivered again)
    instead of being dropped: ``queue`` has no dead-letter queue of its own and is another
    queue's. Its messages are dead letters already; inspecting them (``get`` without an ack)
    or redrives that fail must never drop them. One read of the queue table, asked only when
    a message reached the limit."""
    if queue.dead_letter_queue is not None:
        return False
    rows = conn.execute("SELECT name, queue_id, dead_letter_queue FROM {ks}.queues")
    return any(r.queue_id and r.dead_letter_queue == queue.name for r in rows)


def delete_queue(conn: Connection, name: str) -> QueueInfo:
    """Remove the queue. Its message partitions are dropped whole; a new queue of the same
    name gets a new incarnation id and so never sees them."""
    info = get_queue(conn, name)
    res = conn.cas(
        "DELETE FROM {ks}.queues WHERE name = ? IF queue_id = ?",
        (name, info.queue_id),
        read="SELECT queue_id FROM {ks}.queues WHERE name = ?",
        read_params=(name,),
        applied=lambda row: row is None or row.queue_id != info.queue_id,
    )
    if not res.was_applied:
        raise QueueNotFoundError(f"queue {name!r} was deleted or re-created concurrently")
    row = (
        conn.execute(
            "SELECT next, lo FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
            (info.queue_id, SENTINEL_LO),
        ).one()
        or conn.execute(
            "SELECT next FROM {ks}.monoton WHERE queue_id = ? LIMIT 1", (info.queue_id,)
        ).one()
    )
    ptr = conn.execute(
        "SELECT repair FROM {ks}.pointers WHERE queue_id = ?", (info.queue_id,)
    ).one()
    next_id = (row.next or 0) if row else 0
    first_bucket = (ptr.repair or 0) if ptr else 0
    futures = []
    for bucket, _, _ in split_by_bucket(first_bucket * info.bucket_size, next_id, info.bucket_size):
        futures.append(
            conn.execute_async(
                "DELETE FROM {ks}.messages WHERE queue_id = ? AND bucket = ?",
                (info.queue_id, bucket),
            )
        )
    for stmt in (
        "DELETE FROM {ks}.monoton WHERE queue_id = ?",
        "DELETE FROM {ks}.pointers WHERE queue_id = ?",
        "DELETE FROM {ks}.skipped WHERE queue_id = ?",
        "DELETE FROM {ks}.timer_slots WHERE queue_id = ?",
    ):
        futures.append(conn.execute_async(stmt, (info.queue_id,)))
    for f in futures:
        f.result()
    log.info("deleted queue %s (%s)", name, info.queue_id)
    return info
