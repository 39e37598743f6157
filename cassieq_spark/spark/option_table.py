"""Every option of the cassieq sink and source, declared once.

Each :class:`Option` row holds the option's name (case-insensitive), the query types that take
it, its parser (which also says what values it takes), its default and one line of doc. Three
things are made from the table and nowhere else:

* parsing: ``OPTIONS_BY_KEY[key].read(options)`` is the option's checked value, or its default
  (``options.py`` adds the checks that span several options: pacing, createQueue, ...);
* the unknown-option refusal (:func:`check_known`): the closest spelling and the whole list of
  what the query type takes, so a typo like ``bucketsise`` never goes unnoticed;
* the option reference of docs/spark.md (:func:`markdown_table`; ``python -m
  cassieq_spark.spark.option_table`` prints it, and a unit test fails when the page differs).

To add an option, add a row here, read it where it is used, and paste the printed table into
docs/spark.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import validate
from ..config import CONNECTION_OPTIONS, ConnectionConfig
from ..engine.core import monoton
from ..engine.core.queues import DEFAULT_SETTINGS
from ..errors import ConfigError
from . import source_checks

SINK = "sink"  # df.writeStream / df.write
STREAM = "stream"  # spark.readStream
READ = "read"  # spark.read (takes the stream options too, and ignores them)
QUERY_TYPES = (SINK, STREAM, READ)
ALL = frozenset(QUERY_TYPES)

# The query types a role checks options for: the sink, the source (stream or batch read) and
# the format before Spark says which it is (provider.py).
ROLE_TYPES: dict[str, frozenset[str]] = {
    "sink": frozenset({SINK}),
    "source": frozenset({STREAM, READ}),
    "format": ALL,
}

WRITER_TYPES = {"arrow": "arrow", "rows": "rows"}
REPLAY_MISMATCH = {"fail": "fail", "writeagain": "writeAgain"}
WRITE_ID_SCOPES = {"batch": "batch", "global": "global"}
WRITE_ID_MAX = 200
# A replay of a batch is the first attempt's rows: only a batch that failed at least twice
# may lose rows to the dead-letter queue, so one crash after the sink wrote never moves it.
MIN_BATCH_ATTEMPTS = 2
DEFAULT_LEASE_TIMEOUT = 15.0
DEFAULT_MIN_IDS_PER_PARTITION = 10_000
DEFAULT_MAX_IDS_PER_PARTITION = 100_000
MIN_LEASE_TIMEOUT = 3.0
# A crashed query (its driver killed) keeps every client (get, purge, move) off its queues for up to one
# lease timeout: ten minutes at most.
MAX_LEASE_TIMEOUT = 600.0
CONSUMER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")

_CONNECTION = ConnectionConfig()  # the connection defaults, as ConnectionConfig writes them


# -- parsers: each turns the option's text into a value, or refuses it naming the option -----------


@dataclass(frozen=True)
class Parser:
    """Text that is kept as it is (``str``); ``allowed`` is the docs' value column."""

    allowed: str

    def parse(self, raw: object, label: str) -> Any:
        return str(raw)


@dataclass(frozen=True)
class Integer(Parser):
    """An integer from ``minimum`` to ``maximum`` (default: a bigint, what the JVM and
    Cassandra hold)."""

    allowed: str = ""
    minimum: int | None = None
    maximum: int | None = None

    def parse(self, raw: object, label: str) -> int:
        value = validate.int_option(raw, label, self.minimum, validate.MAX_BIGINT)
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(
                f"option {label!r} must be from {self.minimum} to {self.maximum}, got {value}"
            )
        return value


@dataclass(frozen=True)
class Number(Parser):
    """A finite number from ``minimum`` to ``maximum``."""

    allowed: str = ""
    minimum: float | None = None
    maximum: float | None = None

    def parse(self, raw: object, label: str) -> float:
        return validate.float_option(raw, label, self.minimum, self.maximum)


@dataclass(frozen=True)
class Flag(Parser):
    allowed: str = "`true`/`false`"

    def parse(self, raw: object, label: str) -> bool:
        return validate.boolean(raw, label)


@dataclass(frozen=True)
class Choice(Parser):
    """One of ``choices`` (lower-cased key -> spelling shown), in any case; the value is the
    lower-cased key."""

    choices: Mapping[str, str] | None = None

    def parse(self, raw: object, label: str) -> str:
        choices = self.choices or {}
        value = str(raw).strip().lower()
        if value not in choices:
            raise ConfigError(
                f"option {label!r} must be one of {', '.join(choices.values())}, got {raw!r}"
            )
        return value


@dataclass(frozen=True)
class Custom(Parser):
    """A check of its own: ``check(raw, label)``."""

    check: Callable[[object, str], Any] | None = None

    def parse(self, raw: object, label: str) -> Any:
        return self.check(raw, label) if self.check else str(raw)


def _consumer_id(raw: object, label: str) -> str:
    value = str(raw).strip()
    if not 1 <= len(value) <= 100 or not set(value) <= CONSUMER_ID_CHARS:
        raise ConfigError(
            f"option {label!r} must be 1-100 characters from letters, digits, '_', '-', "
            f"'.', ':', got {value!r}"
        )
    return value


def _write_id(raw: object, label: str) -> str:
    value = str(raw).strip()
    if not value or len(value) > WRITE_ID_MAX or not value.isprintable():
        raise ConfigError(
            f"option {label!r} must be 1 to {WRITE_ID_MAX} printable characters naming this "
            "write, the same on every retry of it, e.g. f'{app}-{batch_id}' in foreachBatch; "
            f"got {raw!r}"
        )
    return value


def _trigger_delay(raw: object, label: str) -> float:
    return source_checks.duration(
        raw,
        label,
        source_checks.DEFAULT_MAX_TRIGGER_DELAY,
        source_checks.MAX_TRIGGER_DELAY,
    )


def _starting_position(raw: object, label: str) -> Any:
    return source_checks.starting_position(raw)


def _dead_letter_queue(raw: object, label: str) -> str | None:
    return str(raw) or None  # checked whole by create_queue


SECONDS = "seconds"
TEXT = Parser("text")


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option: its spelling, the query types that take it, how it is parsed, its default
    (the value when absent) and one line of doc. ``shown_default``: the docs' default cell
    when the default is worked out later (None here); ``queue_setting``: the
    :class:`~cassieq_spark.engine.core.queues.QueueSettings` field it sets with createQueue;
    ``secret``: never logged; ``documented``: False for Spark's own options."""

    name: str
    types: frozenset[str]
    parser: Parser
    default: Any
    doc: str
    shown_default: str | None = None
    queue_setting: str | None = None
    secret: bool = False
    documented: bool = True

    @property
    def key(self) -> str:
        return self.name.lower()

    def given(self, options: Mapping[str, str]) -> bool:
        """``options``: lower-cased keys, None values dropped (``lowered``)."""
        return self.key in options

    def read(self, options: Mapping[str, str]) -> Any:
        """The checked value of this option in ``options`` (lower-cased keys), or its
        default when absent."""
        if self.key not in options:
            return self.default
        return self.parser.parse(options[self.key], self.name)

    def default_cell(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        d = self.default
        if d is None:
            return "none"
        if isinstance(d, bool):
            return f"`{str(d).lower()}`"
        if isinstance(d, int):
            return f"{d:,}"
        if isinstance(d, float):
            return f"{d:g}" if math.isfinite(d) else str(d)
        return f"`{d}`"

    def types_cell(self) -> str:
        if self.types == ALL:
            return "all"
        return ", ".join(t for t in QUERY_TYPES if t in self.types)


def _queue_setting(name: str, field: str, parser: Parser, doc: str) -> Option:
    return Option(name, ALL, parser, getattr(DEFAULT_SETTINGS, field), doc, queue_setting=field)


def _connection(name: str, allowed: str, default: Any, doc: str, **kw: Any) -> Option:
    return Option(name, ALL, Parser(allowed), default, doc, **kw)


_SOURCE = frozenset({STREAM, READ})
_STREAM = frozenset({STREAM})
_SINK = frozenset({SINK})

OPTIONS: tuple[Option, ...] = (
    Option(
        "queue",
        ALL,
        Parser("a queue name"),
        None,
        "the queue; for the sink, refused together with a `queue` column unless "
        "`routeByColumn=true`",
        shown_default="required, unless `queues`/`queuePattern` (source) or a `queue` column "
        "(sink)",
    ),
    Option(
        "queues",
        _SOURCE,
        Parser("comma-separated queue names"),
        None,
        "read several queues in one query: one offset per queue, the `queue` column tells rows "
        "apart, each queue acked on commit under its own lease; a queue added to the list on a "
        "restart is read from its oldest message; one removed has its last batch acked and its "
        "lease given back",
    ),
    Option(
        "queuePattern",
        _SOURCE,
        Parser(
            "an RE2 regular expression (Python syntax without backreferences or lookaround; "
            "linear-time matching), matched against whole queue names"
        ),
        None,
        "read every queue whose name matches, dead-letter queues too; a new matching queue is "
        "read from its oldest message from the next trigger on (not while another streaming "
        "query holds its lease: a warning, then it joins once free), a deleted one is dropped "
        "with a warning",
    ),
    _connection(
        "url",
        "`cassieq://[user@]host[,host...][:port]/keyspace`",
        None,
        "the connection in one value; options given beside it win over its parts",
    ),
    _connection(
        "contactPoints",
        "comma-separated hosts, `host:port` sets the port too",
        ",".join(_CONNECTION.contact_points),
        "Cassandra contact points",
    ),
    _connection(
        "port", "1-65535", _CONNECTION.port, "CQL port", shown_default=str(_CONNECTION.port)
    ),
    _connection("keyspace", "a keyspace name", _CONNECTION.keyspace, "where the queues live"),
    _connection("localDc", "a data center name", _CONNECTION.local_dc, "the client's data center"),
    _connection(
        "consistency",
        "a quorum level",
        _CONNECTION.consistency,
        "level of reads and writes; below a quorum is refused ([cluster.md](cluster.md))",
    ),
    _connection(
        "serialConsistency",
        "`SERIAL` or `LOCAL_SERIAL`",
        _CONNECTION.serial_consistency,
        "level of compare-and-sets ([cluster.md](cluster.md))",
    ),
    _connection("connectTimeout", SECONDS, _CONNECTION.connect_timeout, "driver connect timeout"),
    _connection("requestTimeout", SECONDS, _CONNECTION.request_timeout, "driver request timeout"),
    _connection(
        "username", "text", _CONNECTION.username, "authentication ([security.md](security.md))"
    ),
    _connection(
        "password",
        "text",
        None,
        "authentication, with `username`; never logged",
        secret=True,
    ),
    _connection(
        "passwordFile",
        "a file holding the password (its first line)",
        None,
        "instead of `password`; read where the connection is made, so on every executor too",
    ),
    _connection("ssl", "`true`/`false`", _CONNECTION.ssl_enabled, "TLS"),
    _connection("sslCaFile", "a PEM file", _CONNECTION.ssl_ca_file, "the CA that signed the nodes"),
    _connection("sslCertFile", "a PEM file", _CONNECTION.ssl_cert_file, "client certificate"),
    _connection("sslKeyFile", "a PEM file", _CONNECTION.ssl_key_file, "client certificate's key"),
    _connection(
        "sslVerify", "`true`/`false`", _CONNECTION.ssl_verify, "check the nodes' certificates"
    ),
    _connection(
        "secureConnectBundle",
        "a secure-connect bundle's path (.zip)",
        None,
        "a managed service (Astra) instead of contact points, port and TLS; the file must be "
        "on every executor ([client.md](client.md#managed-services-and-your-own-session))",
    ),
    _connection(
        "authProvider",
        "`package.module:callable`",
        None,
        "a callable returning a `cassandra.auth.AuthProvider`, called where the connection is "
        "made (every executor too); instead of `username`/`password`",
    ),
    Option(
        "createQueue",
        ALL,
        Flag(),
        False,
        "create a missing queue (with `queues`: each missing one; the sink: every queue a row "
        "names; not with `queuePattern`) with the settings below; without it those settings "
        "are refused",
    ),
    _queue_setting("bucketSize", "bucket_size", Integer("an integer"), "queue setting at creation"),
    _queue_setting(
        "maxDeliveryCount", "max_delivery_count", Integer("an integer"), "queue setting at creation"
    ),
    _queue_setting(
        "visibilityTimeout", "visibility_timeout", Number(SECONDS), "queue setting at creation"
    ),
    _queue_setting("repairTimeout", "repair_timeout", Number(SECONDS), "queue setting at creation"),
    _queue_setting(
        "deadLetterQueue",
        "dead_letter_queue",
        Custom("a queue name", check=_dead_letter_queue),
        "queue setting at creation",
    ),
    _queue_setting("messageTtl", "message_ttl", Integer(SECONDS), "queue setting at creation"),
    _queue_setting(
        "maxPayloadBytes", "max_payload_bytes", Integer("bytes"), "queue setting at creation"
    ),
    Option(
        "checkpointLocation",
        _SINK,
        Parser("a path"),
        None,
        "Spark's own; the sink also records its target there",
    ),
    Option(
        "path", _SINK, TEXT, None, "Spark's own, added to every sink's options", documented=False
    ),
    Option(
        "queryName",
        _SINK,
        TEXT,
        None,
        "Spark's own, added to a named query's sink options",
        documented=False,
    ),
    Option(
        "writeId",
        _SINK,
        Custom(f"up to {WRITE_ID_MAX} characters", check=_write_id),
        None,
        "with `df.write` inside `foreachBatch`: a replayed batch writes each row once; keyed "
        "with the streaming query's id and batch id (seen on Spark's stream thread, or given "
        "by `batchId` and `queryCheckpoint`), so a new checkpoint never meets an old one's "
        "keys; with `writeIdScope=global` the key itself (make it unique per job)",
    ),
    Option(
        "batchId",
        _SINK,
        Integer("0 or more", minimum=0),
        None,
        "with `writeId` and `queryCheckpoint`, `df.write` only: the micro-batch of the "
        "`foreachBatch` call (its `batch_id`); needed over Spark Connect and in threads of "
        "your own, where the sink cannot see the batch",
    ),
    Option(
        "queryCheckpoint",
        _SINK,
        Parser("a path"),
        None,
        "with `writeId` and `batchId`, `df.write` only: the `checkpointLocation` of the "
        "streaming query whose `foreachBatch` writes; its query id (in the checkpoint's "
        "`metadata`) keys the write",
    ),
    Option(
        "writeIdScope",
        _SINK,
        Choice("`batch`, `global`", choices=WRITE_ID_SCOPES),
        "batch",
        "`batch`: a `writeId` is keyed with its streaming query and batch, refused where "
        "neither Spark nor `batchId`/`queryCheckpoint` name them; `global`: the `writeId` "
        "alone is the key (a `df.write` outside any streaming query)",
    ),
    Option(
        "replayMismatch",
        _SINK,
        Choice("`fail`, `writeAgain`", choices=REPLAY_MISMATCH),
        "fail",
        "what a replay that brings other rows does",
    ),
    Option(
        "routeByColumn",
        _SINK,
        Flag(),
        False,
        "with option `queue` and a `queue` column: route each row by the column, option "
        "`queue` taking the rows whose column is null (without it the pair is refused: rows "
        "passed on from the source name their source queue)",
    ),
    Option(
        "allowTargetChange",
        _SINK,
        Flag(),
        False,
        "let a restarted query write to another queue, keyspace or cluster",
    ),
    Option(
        "idBlockSize",
        _SINK,
        Integer(f"1-{monoton.MAX_BLOCK:,}", minimum=1, maximum=monoton.MAX_BLOCK),
        monoton.MAX_BLOCK,
        "ids reserved per block",
    ),
    Option(
        "writerType",
        _SINK,
        Choice("`arrow`, `rows`", choices=WRITER_TYPES),
        "arrow",
        "the sink's writer",
    ),
    Option(
        "startingPosition",
        _STREAM,
        Custom(
            '`earliest`, `latest`, `{"id": N}` (one queue only), `{"timestamp": epoch_ms}`',
            check=_starting_position,
        ),
        None,
        "where a query without checkpoint offsets starts (fixed once per run; batch 0's offset "
        "keeps it, so its replay reads the same messages); ignored with a logged note once the "
        "checkpoint has offsets",
        shown_default="`earliest`",
    ),
    Option(
        "maxMessagesPerTrigger",
        _STREAM,
        Integer("integer >= 1", minimum=1),
        None,
        "read limit per batch, delayed and redelivered messages included (those due in one "
        "millisecond come together); several queues share it evenly, the larger shares going "
        "round, a share a queue leaves unused going to the next",
    ),
    Option(
        "minMessagesPerTrigger",
        _STREAM,
        Integer("integer >= 1, not above the maximum", minimum=1),
        None,
        "no batch until that many messages (all queues together) are there, unless "
        "`maxTriggerDelay` passed; AvailableNow and Once ignore it",
    ),
    Option(
        "maxTriggerDelay",
        _STREAM,
        Custom("a duration (`500ms`, `15s`, `5m`, `1h`)", check=_trigger_delay),
        source_checks.DEFAULT_MAX_TRIGGER_DELAY,
        "with `minMessagesPerTrigger`: the longest a trigger waits",
        shown_default="`15m`",
    ),
    Option(
        "failOnDataLoss",
        _STREAM,
        Flag(),
        True,
        "ids repair counted as lost, or messages a `purge` dropped while the query was stopped, "
        "fail it with `DataLossError` naming queue, ids and cause, once (`false`: a warning); "
        "TTL expiry is not detected",
    ),
    Option(
        "countDeliveries",
        _STREAM,
        Flag(),
        True,
        "count the runs that read a batch without a commit (a restart replays the uncommitted "
        "batch) and move its messages to the dead-letter queue after `maxBatchAttempts` of "
        "them; with no dead-letter queue the query fails with `PoisonBatchError` instead "
        "(`failOnDataLoss=false`: dropped, counted). A replay brings the first attempt's rows "
        "until then (`false`: nothing counted or moved)",
    ),
    Option(
        "maxBatchAttempts",
        _STREAM,
        Integer(f"integer >= {MIN_BATCH_ATTEMPTS}", minimum=MIN_BATCH_ATTEMPTS),
        None,
        "with `countDeliveries`: runs that may fail a batch before its messages move",
        shown_default=f"the queue's `maxDeliveryCount`, at least {MIN_BATCH_ATTEMPTS}",
    ),
    Option(
        "leaseTimeout",
        _STREAM,
        Number(
            f"seconds, {MIN_LEASE_TIMEOUT:g} to {MAX_LEASE_TIMEOUT:g}",
            minimum=MIN_LEASE_TIMEOUT,
            maximum=MAX_LEASE_TIMEOUT,
        ),
        DEFAULT_LEASE_TIMEOUT,
        "the consumer lease of each queue read",
    ),
    Option(
        "consumerId",
        _STREAM,
        Custom("1-100 of letters, digits, `_-.:`", check=_consumer_id),
        None,
        "names the lease holder, so a restart takes its leases back at once; one per query "
        "(two queries with the same one take the lease from each other: a warning)",
        shown_default="random",
    ),
    Option(
        "maxIdsPerPartition",
        _SOURCE,
        Integer("integer >= 1", minimum=1),
        DEFAULT_MAX_IDS_PER_PARTITION,
        "most ids per Spark task",
    ),
    Option(
        "minIdsPerPartition",
        _SOURCE,
        Integer("integer >= 1", minimum=1),
        None,
        "fewest ids per Spark task: small buckets are grouped (a task costs far more than "
        "reading a small bucket)",
        shown_default=f"{DEFAULT_MIN_IDS_PER_PARTITION:,} (at most `maxIdsPerPartition`)",
    ),
)

OPTIONS_BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}
QUEUE_SETTINGS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.queue_setting)
SECRET_OPTIONS = frozenset(o.key for o in OPTIONS if o.secret)
# The source options naming queues beside 'queue'.
SEVERAL_QUEUES = ("queues", "queuepattern")


def option(name: str) -> Option:
    """The row of option ``name`` (any case)."""
    return OPTIONS_BY_KEY[name.lower()]


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's options with lower-cased keys, options set to None left out."""
    return {str(k).lower(): v for k, v in options.items() if v is not None}


def allowed(role: str) -> dict[str, str]:
    """What ``role`` (sink, source or format) takes: lower-cased key -> spelling shown."""
    types = ROLE_TYPES[role]
    return {o.key: o.name for o in OPTIONS if o.types & types}


def only_for(query_type: str) -> frozenset[str]:
    """The keys of the options only ``query_type`` takes."""
    return frozenset(o.key for o in OPTIONS if o.types == {query_type})


def check_known(options: Mapping[str, str], role: str) -> None:
    """Fail on the first option that ``role`` does not take, naming the closest spelling and
    every option it takes."""
    validate.known_options(lowered(options), allowed(role), role)


def connection_options(options: Mapping[str, str]) -> dict[str, str]:
    """The connection options among ``options`` (lower-cased keys)."""
    return {k: v for k, v in options.items() if k in CONNECTION_OPTIONS}


HEADER = "| option | value | default | meaning | query type |"


def markdown_table() -> str:
    """docs/spark.md's option reference: one row per documented option, in table order."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [HEADER, "|---|---|---|---|---|"]
    for o in OPTIONS:
        if o.documented:
            cells = (f"`{o.name}`", o.parser.allowed, o.default_cell(), o.doc, o.types_cell())
            rows.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown_table())
