"""The one place where options of the cassieq sink and source are checked.

Spark passes options as a case-insensitive dict of strings. Every option a role (sink or
source) accepts is listed here; anything else fails with the name of the offending option and
the list of allowed ones, so a typo like ``bucketsise`` never goes unnoticed.

To add a source option, add it to ``SOURCE_OPTIONS`` (lower-cased key -> spelling shown to
users) and read it with ``SourceOptions.int_option``/``float_option``/``str_option``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import validate
from ..config import CONNECTION_OPTIONS, ConnectionConfig, connection_from_options
from ..config import validate_queue_name as _validate_queue_name
from ..engine.core import monoton, queues
from ..engine.core.queues import DEFAULT_SETTINGS as DEFAULTS
from ..engine.core.queues import QueueInfo
from ..engine.store import schema
from ..engine.store.session import Connection
from ..engine.stream.start import StartingPosition
from ..errors import ConfigError, QueueNotFoundError
from . import source_checks

log = logging.getLogger(__name__)

# lower-cased key -> the spelling used in docs and error messages
COMMON_OPTIONS: dict[str, str] = {"queue": "queue", **CONNECTION_OPTIONS}

# Settings of a queue that `createQueue=true` creates when it is missing.
QUEUE_SETTING_OPTIONS: dict[str, str] = {
    "createqueue": "createQueue",
    "bucketsize": "bucketSize",
    "maxdeliverycount": "maxDeliveryCount",
    "visibilitytimeout": "visibilityTimeout",
    "repairtimeout": "repairTimeout",
    "deadletterqueue": "deadLetterQueue",
    "messagettl": "messageTtl",
    "maxpayloadbytes": "maxPayloadBytes",
}

SINK_OPTIONS: dict[str, str] = {
    "idblocksize": "idBlockSize",
    "writertype": "writerType",
    "writeid": "writeId",
    "replaymismatch": "replayMismatch",
    "allowtargetchange": "allowTargetChange",
    "routebycolumn": "routeByColumn",
    # Spark adds these two to every sink's options.
    "path": "path",
    "checkpointlocation": "checkpointLocation",
}

SOURCE_OPTIONS: dict[str, str] = {
    "maxmessagespertrigger": "maxMessagesPerTrigger",
    "maxidsperpartition": "maxIdsPerPartition",
    "minidsperpartition": "minIdsPerPartition",
    "leasetimeout": "leaseTimeout",
    "consumerid": "consumerId",
    "startingposition": "startingPosition",
    "minmessagespertrigger": "minMessagesPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "failondataloss": "failOnDataLoss",
    "countdeliveries": "countDeliveries",
    "maxbatchattempts": "maxBatchAttempts",
    "queues": "queues",
    "queuepattern": "queuePattern",
}

SEVERAL_QUEUES = ("queues", "queuepattern")  # source options naming queues beside 'queue'

WRITER_TYPES = ("arrow", "rows")
DEFAULT_WRITER_TYPE = "arrow"
REPLAY_MISMATCH = {"fail": "fail", "writeagain": "writeAgain"}
WRITE_ID_MAX = 200
# A replay of a batch is the first attempt's rows: only a batch that failed at least twice
# may lose rows to the dead-letter queue, so one crash after the sink wrote never moves it.
MIN_BATCH_ATTEMPTS = 2

SECRET_OPTIONS = frozenset({"password"})


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items() if v is not None}


def check_known(options: Mapping[str, str], allowed: Mapping[str, str], role: str) -> None:
    """Fail on the first option that ``role`` does not accept, listing the ones it does."""
    validate.known_options(_lower(options), allowed, role)


def redacted(options: Mapping[str, str]) -> dict[str, str]:
    """Options safe to log: secrets replaced."""
    return {k: ("*****" if str(k).lower() in SECRET_OPTIONS else v) for k, v in options.items()}


def _int(o: dict[str, str], key: str, label: str, default: int | None, minimum: int | None):
    """An integer option; at most a bigint (what the JVM and Cassandra hold) when no tighter
    bound is checked later."""
    if key not in o:
        return default
    return validate.int_option(o[key], label, minimum, validate.MAX_BIGINT)


def _float(
    o: dict[str, str],
    key: str,
    label: str,
    default: float | None,
    minimum: float | None,
    maximum: float | None = None,
):
    if key not in o:
        return default
    return validate.float_option(o[key], label, minimum, maximum)


def _bool(o: dict[str, str], key: str, label: str, default: bool) -> bool:
    if key not in o:
        return default
    return validate.boolean(o[key], label)


@dataclass(frozen=True)
class CommonOptions:
    """What sink and source share: where Cassandra is, which queue, how to create it."""

    connection: ConnectionConfig
    queue: str
    create_queue: bool = False
    queue_settings: dict = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        return f"queue {self.queue!r} at {self.connection.describe()}"


def _common(o: dict[str, str], role: str, queue_column: bool = False) -> CommonOptions:
    """``queue_column``: the sink's input names each row's queue, so option 'queue' (then
    ``""`` when absent) is only the default for rows whose column is null. A source may name
    its queues with option 'queues' or 'queuePattern' instead (``source_checks``)."""
    queue = o.get("queue")
    several = role == "source" and any(str(o.get(k) or "").strip() for k in SEVERAL_QUEUES)
    if queue is None or not str(queue).strip():
        if queue_column or several:
            queue = ""
        else:
            raise ConfigError(
                f"option 'queue' is required for the cassieq {role}: the name of the queue, "
                'e.g. .option("queue", "events")'
                + (
                    ", or a string column 'queue' in the input naming each row's queue"
                    if role == "sink"
                    else ", or option 'queues' (comma-separated names) or 'queuePattern' (a "
                    "regular expression over queue names) to read several"
                )
            )
    else:
        # Checked whole, as the client and the CLI do: "sq\n" is not queue "sq".
        queue = _validate_queue_name(str(queue), "queue name (option 'queue')")
    connection = connection_from_options({k: v for k, v in o.items() if k in CONNECTION_OPTIONS})
    create = _bool(o, "createqueue", "createQueue", False)
    given = [
        QUEUE_SETTING_OPTIONS[k] for k in QUEUE_SETTING_OPTIONS if k in o and k != "createqueue"
    ]
    if given and not create:
        raise ConfigError(
            f"option(s) {', '.join(given)} only take effect when the queue is created; "
            "add .option('createQueue', 'true') or remove them"
        )
    settings: dict = {}
    if create:
        dlq = o.get("deadletterqueue")
        settings = {
            "bucket_size": _int(o, "bucketsize", "bucketSize", DEFAULTS.bucket_size, None),
            "max_delivery_count": _int(
                o, "maxdeliverycount", "maxDeliveryCount", DEFAULTS.max_delivery_count, None
            ),
            "visibility_timeout": _float(
                o, "visibilitytimeout", "visibilityTimeout", DEFAULTS.visibility_timeout, None
            ),
            "repair_timeout": _float(
                o, "repairtimeout", "repairTimeout", DEFAULTS.repair_timeout, None
            ),
            "dead_letter_queue": str(dlq) if dlq else None,  # checked whole by create_queue
            "message_ttl": _int(o, "messagettl", "messageTtl", None, None),
            "max_payload_bytes": _int(
                o, "maxpayloadbytes", "maxPayloadBytes", DEFAULTS.max_payload_bytes, None
            ),
        }
        try:
            queues.validate_settings(name=queue, **settings)
        except ConfigError as exc:
            raise ConfigError(f"invalid queue setting for createQueue: {exc}") from None
    return CommonOptions(connection, queue, create, settings, o)


def check_any_role(options: Mapping[str, str]) -> None:
    """Options that neither the sink nor the source accepts, or a bad common option, fail."""
    o = _lower(options)
    check_known(
        o, {**COMMON_OPTIONS, **QUEUE_SETTING_OPTIONS, **SINK_OPTIONS, **SOURCE_OPTIONS}, "format"
    )
    _common(o, "source")


@dataclass(frozen=True)
class SinkOptions:
    common: CommonOptions
    id_block_size: int = monoton.MAX_BLOCK
    writer_type: str = DEFAULT_WRITER_TYPE
    checkpoint_location: str | None = None
    # df.write only: the idempotency key of the write (None: a random one per write)
    write_id: str | None = None
    replay_mismatch: str = "fail"  # or "writeagain"
    allow_target_change: bool = False

    @property
    def default_queue(self) -> str | None:
        """Option 'queue', or None when only the input's ``queue`` column names queues."""
        return self.common.queue or None


def _write_id(o: dict[str, str], streaming: bool | None) -> str | None:
    if "writeid" not in o:
        return None
    if streaming:
        raise ConfigError(
            "option 'writeId' is for df.write (e.g. inside foreachBatch); a streaming query "
            "already writes each micro-batch once through its checkpoint"
        )
    value = str(o["writeid"]).strip()
    if not value or len(value) > WRITE_ID_MAX or not value.isprintable():
        raise ConfigError(
            f"option 'writeId' must be 1 to {WRITE_ID_MAX} printable characters naming this "
            "write, the same on every retry of it, e.g. f'{app}-{batch_id}' in foreachBatch; "
            f"got {o['writeid']!r}"
        )
    return value


def sink_options(
    options: Mapping[str, str], streaming: bool | None = None, queue_column: bool = False
) -> SinkOptions:
    """Parse and check the options of ``df.write``/``df.writeStream`` with format ``cassieq``
    (``streaming``: which of the two; None when not known yet; ``queue_column``: the input
    has a ``queue`` column, so option 'queue' may be omitted)."""
    o = _lower(options)
    check_known(o, {**COMMON_OPTIONS, **QUEUE_SETTING_OPTIONS, **SINK_OPTIONS}, "sink")
    common = _common(o, "sink", queue_column)
    block = _int(o, "idblocksize", "idBlockSize", monoton.MAX_BLOCK, 1)
    if block > monoton.MAX_BLOCK:
        raise ConfigError(
            f"option 'idBlockSize' must be from 1 to {monoton.MAX_BLOCK}, got {block}"
        )
    writer_type = str(o.get("writertype", DEFAULT_WRITER_TYPE)).strip().lower()
    if writer_type not in WRITER_TYPES:
        raise ConfigError(
            f"option 'writerType' must be one of {', '.join(WRITER_TYPES)}, got {o['writertype']!r}"
        )
    if streaming is False and "allowtargetchange" in o:
        raise ConfigError(
            "option 'allowTargetChange' is for df.writeStream (it lets a restarted query write "
            "to another queue than its checkpoint recorded); df.write has no checkpoint: drop it"
        )
    mismatch = str(o.get("replaymismatch", "fail")).strip().lower()
    if mismatch not in REPLAY_MISMATCH:
        raise ConfigError(
            f"option 'replayMismatch' must be one of {', '.join(REPLAY_MISMATCH.values())}, got "
            f"{o['replaymismatch']!r}"
        )
    route_by_column = _bool(o, "routebycolumn", "routeByColumn", False)
    if queue_column and common.queue and not route_by_column:
        raise ConfigError(
            f"option 'queue' ({common.queue!r}) and a 'queue' column in the input: the column "
            "would send each row to the queue it names and option 'queue' would only take the "
            "rows whose column is null (rows passed on from the cassieq source name their source "
            "queue, so they would go back into it). To write every row to "
            f"{common.queue!r}, drop the column (e.g. df.drop('queue')); to route rows by the "
            "column with option 'queue' for null rows, set option routeByColumn=true"
        )
    return SinkOptions(
        common,
        block,
        writer_type,
        o.get("checkpointlocation"),
        _write_id(o, streaming),
        mismatch,
        _bool(o, "allowtargetchange", "allowTargetChange", False),
    )


@dataclass(frozen=True)
class SourceOptions:
    common: CommonOptions

    def str_option(self, name: str, default: str | None = None) -> str | None:
        value = self.common.raw.get(name.lower())
        return default if value is None else str(value)

    def int_option(self, name: str, default: int | None = None, minimum: int | None = None):
        return _int(self.common.raw, name.lower(), name, default, minimum)

    def float_option(
        self,
        name: str,
        default: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None:
        return _float(self.common.raw, name.lower(), name, default, minimum, maximum)


def source_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse and check the options of ``spark.readStream``/``spark.read`` with format ``cassieq``."""
    o = _lower(options)
    check_known(o, {**COMMON_OPTIONS, **QUEUE_SETTING_OPTIONS, **SOURCE_OPTIONS}, "source")
    return SourceOptions(_common(o, "source"))


DEFAULT_LEASE_TIMEOUT = 15.0
DEFAULT_MIN_IDS_PER_PARTITION = 10_000
DEFAULT_MAX_IDS_PER_PARTITION = 100_000
MIN_LEASE_TIMEOUT = 3.0
# A stopped or crashed query keeps every client (get, purge, move) off its queues for up to one
# lease timeout: ten minutes at most.
MAX_LEASE_TIMEOUT = 600.0
CONSUMER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")


@dataclass(frozen=True)
class SourceSettings:
    """Every option of the source, checked (``parse_source_settings``)."""

    common: CommonOptions
    connection: tuple[tuple[str, str], ...]
    max_messages_per_trigger: int | None
    max_ids_per_partition: int | None
    min_ids_per_partition: int | None
    lease_timeout: float
    consumer_id: str | None
    # where a query without a checkpoint starts; None: not given (earliest)
    starting_position: StartingPosition | None = None
    # pacing: no batch below this many messages, unless max_trigger_delay (s) has passed
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float = source_checks.DEFAULT_MAX_TRIGGER_DELAY
    # lost ids (see engine/upkeep/lost.py) fail the query (True) or are logged as a warning
    fail_on_data_loss: bool = True
    # count the runs that read a batch without a commit, and move its messages after
    # max_batch_attempts of them (None: the queue's max_delivery_count, at least 2)
    count_deliveries: bool = True
    max_batch_attempts: int | None = None
    # which queues: option queue, queues or queuePattern (default: the one of common.queue)
    selection: source_checks.QueueSelection = source_checks.QueueSelection(source_checks.ONE)


def parse_source_settings(options: Mapping[str, str]) -> SourceSettings:
    """Check every option of the source; a ConfigError names the option and what is allowed."""
    parsed = source_options(options)
    raw = parsed.common.raw
    connection = tuple(sorted((k, str(v)) for k, v in raw.items() if k in CONNECTION_OPTIONS))
    max_ids = parsed.int_option("maxIdsPerPartition", DEFAULT_MAX_IDS_PER_PARTITION, 1)
    given_min = parsed.int_option("minIdsPerPartition", None, 1)
    # A Spark task costs a few hundred ms here; a 1,000-id bucket is far less work than that,
    # so small buckets are grouped by default.
    min_ids = min(DEFAULT_MIN_IDS_PER_PARTITION, max_ids) if given_min is None else given_min
    if min_ids > max_ids:
        raise ConfigError(
            f"option 'minIdsPerPartition' ({min_ids}) must not exceed 'maxIdsPerPartition' ({max_ids})"
        )
    lease = parsed.float_option(
        "leaseTimeout", DEFAULT_LEASE_TIMEOUT, MIN_LEASE_TIMEOUT, MAX_LEASE_TIMEOUT
    )
    consumer_id = parsed.str_option("consumerId")
    if consumer_id is not None:
        consumer_id = consumer_id.strip()
        if not 1 <= len(consumer_id) <= 100 or not set(consumer_id) <= CONSUMER_ID_CHARS:
            raise ConfigError(
                f"option 'consumerId' must be 1-100 characters from letters, digits, '_', '-', "
                f"'.', ':', got {consumer_id!r}"
            )
    max_messages = parsed.int_option("maxMessagesPerTrigger", None, 1)
    min_messages = parsed.int_option("minMessagesPerTrigger", None, 1)
    source_checks.check_pacing(min_messages, max_messages, "maxtriggerdelay" in raw)
    selection = source_checks.queue_selection(parsed.common.queue, raw)
    start = (
        source_checks.starting_position(raw["startingposition"])
        if "startingposition" in raw
        else None
    )
    source_checks.check_several(selection, start, parsed.common.create_queue)
    return SourceSettings(
        common=parsed.common,
        connection=connection,
        max_messages_per_trigger=max_messages,
        max_ids_per_partition=max_ids,
        min_ids_per_partition=min_ids,
        lease_timeout=float(lease or DEFAULT_LEASE_TIMEOUT),
        consumer_id=consumer_id,
        starting_position=start,
        min_messages_per_trigger=min_messages,
        max_trigger_delay=source_checks.duration(
            raw.get("maxtriggerdelay"),
            "maxTriggerDelay",
            source_checks.DEFAULT_MAX_TRIGGER_DELAY,
            source_checks.MAX_TRIGGER_DELAY,
        ),
        fail_on_data_loss=_bool(raw, "failondataloss", "failOnDataLoss", True),
        count_deliveries=_bool(raw, "countdeliveries", "countDeliveries", True),
        max_batch_attempts=parsed.int_option("maxBatchAttempts", None, MIN_BATCH_ATTEMPTS),
        selection=selection,
    )


def resolve_queue(conn: Connection, common: CommonOptions, name: str | None = None) -> QueueInfo:
    """The queue ``name`` (default: option 'queue'); created first with ``createQueue=true``."""
    name = name or common.queue
    schema.require_schema(conn)
    if common.create_queue:
        info = queues.create_queue(conn, name, exist_ok=True, **common.queue_settings)
        if info.bucket_size != common.queue_settings.get("bucket_size", info.bucket_size):
            log.warning(
                "queue %s already exists with bucket size %d; createQueue settings are ignored",
                name,
                info.bucket_size,
            )
        return info
    try:
        return queues.get_queue(conn, name)
    except QueueNotFoundError:
        raise QueueNotFoundError(
            f"queue {name!r} does not exist in keyspace {conn.keyspace!r}; create it "
            f"(cassieq create-queue {name}) or set option createQueue=true"
        ) from None
