"""The options of the cassieq sink and source, parsed into the settings each one runs with.

Every option is a row of ``option_table.OPTIONS`` (its name, query types, parser, default and
doc); this module reads the rows' values (``option(name).read(o)``) in the order a query needs
them and adds the checks that span several options: which queues, createQueue and the queue
settings, pacing, the sink's queue option against a ``queue`` column. An unknown option fails
first, with the closest spelling and the list of what the query type takes
(``option_table.check_known``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import ConnectionConfig, connection_from_options
from ..config import validate_queue_name as _validate_queue_name
from ..engine.core import queues
from ..engine.core.queues import QueueInfo
from ..engine.store import schema
from ..engine.store.session import Connection
from ..engine.stream.start import StartingPosition
from ..errors import ConfigError, QueueNotFoundError
from . import source_checks
from .option_table import (
    DEFAULT_MIN_IDS_PER_PARTITION,
    QUEUE_SETTINGS,
    SECRET_OPTIONS,
    SEVERAL_QUEUES,
    check_known,
    connection_options,
    lowered,
    option,
)
from .selection import QueueSelection, queue_selection

log = logging.getLogger(__name__)


def redacted(options: Mapping[str, str]) -> dict[str, str]:
    """Options safe to log: secrets replaced."""
    return {k: ("*****" if str(k).lower() in SECRET_OPTIONS else v) for k, v in options.items()}


@dataclass(frozen=True)
class CommonOptions:
    """What sink and source share: where Cassandra is, which queue, how to create it."""

    connection: ConnectionConfig
    queue: str
    create_queue: bool = False
    queue_settings: dict = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict, repr=False)
    # The queue settings whose options were given: an existing queue must have these values.
    queue_settings_given: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"queue {self.queue!r} at {self.connection.describe()}"


def _common(o: dict[str, str], role: str, queue_column: bool = False) -> CommonOptions:
    """``queue_column``: the sink's input names each row's queue, so option 'queue' (then
    ``""`` when absent) is only the default for rows whose column is null. A source may name
    its queues with option 'queues' or 'queuePattern' instead (``selection``)."""
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
    connection = connection_from_options(connection_options(o))
    create = option("createQueue").read(o)
    given = [setting.name for setting in QUEUE_SETTINGS if setting.given(o)]
    if given and not create:
        raise ConfigError(
            f"option(s) {', '.join(given)} only take effect when the queue is created; "
            "add .option('createQueue', 'true') or remove them"
        )
    settings: dict = {}
    if create:
        settings = {str(setting.queue_setting): setting.read(o) for setting in QUEUE_SETTINGS}
        try:
            queues.validate_settings(name=queue, **settings)
        except ConfigError as exc:
            raise ConfigError(f"invalid queue setting for createQueue: {exc}") from None
    given_settings = tuple(
        str(setting.queue_setting) for setting in QUEUE_SETTINGS if setting.given(o)
    )
    return CommonOptions(connection, queue, create, settings, o, given_settings)


def check_any_role(options: Mapping[str, str]) -> None:
    """Options that neither the sink nor the source accepts, or a bad common option, fail."""
    o = lowered(options)
    check_known(o, "format")
    _common(o, "source")


@dataclass(frozen=True)
class SinkOptions:
    common: CommonOptions
    id_block_size: int = option("idBlockSize").default
    writer_type: str = option("writerType").default
    checkpoint_location: str | None = None
    # df.write only: the idempotency key of the write (None: a random one per write)
    write_id: str | None = None
    replay_mismatch: str = option("replayMismatch").default  # or "writeagain"
    allow_target_change: bool = False
    # df.write with a writeId: the streaming query's batch it belongs to, named by the user
    # (both or neither), and whether the writeId alone is the key ("global")
    batch_id: int | None = None
    query_checkpoint: str | None = None
    write_id_scope: str = option("writeIdScope").default

    @property
    def default_queue(self) -> str | None:
        """Option 'queue', or None when only the input's ``queue`` column names queues."""
        return self.common.queue or None


def sink_options(
    options: Mapping[str, str], streaming: bool | None = None, queue_column: bool = False
) -> SinkOptions:
    """Parse and check the options of ``df.write``/``df.writeStream`` with format ``cassieq``
    (``streaming``: which of the two; None when not known yet; ``queue_column``: the input
    has a ``queue`` column, so option 'queue' may be omitted)."""
    o = lowered(options)
    check_known(o, "sink")
    common = _common(o, "sink", queue_column)
    block = option("idBlockSize").read(o)
    writer_type = option("writerType").read(o)
    if streaming is False and option("allowTargetChange").given(o):
        raise ConfigError(
            "option 'allowTargetChange' is for df.writeStream (it lets a restarted query write "
            "to another queue than its checkpoint recorded); df.write has no checkpoint: drop it"
        )
    mismatch = option("replayMismatch").read(o)
    route_by_column = option("routeByColumn").read(o)
    if queue_column and common.queue and not route_by_column:
        raise ConfigError(
            f"option 'queue' ({common.queue!r}) and a 'queue' column in the input: the column "
            "would send each row to the queue it names and option 'queue' would only take the "
            "rows whose column is null (rows passed on from the cassieq source name their source "
            "queue, so they would go back into it). To write every row to "
            f"{common.queue!r}, drop the column (e.g. df.drop('queue')); to route rows by the "
            "column with option 'queue' for null rows, set option routeByColumn=true"
        )
    if streaming and option("writeId").given(o):
        raise ConfigError(
            "option 'writeId' is for df.write (e.g. inside foreachBatch); a streaming query "
            "already writes each micro-batch once through its checkpoint"
        )
    write_id = option("writeId").read(o)
    batch_id = option("batchId").read(o)
    query_checkpoint = option("queryCheckpoint").read(o)
    scope = option("writeIdScope").read(o)
    _check_write_scope(o, streaming, write_id, batch_id, query_checkpoint, scope)
    return SinkOptions(
        common,
        block,
        writer_type,
        option("checkpointLocation").read(o),
        write_id,
        mismatch,
        option("allowTargetChange").read(o),
        batch_id,
        query_checkpoint,
        scope,
    )


def _check_write_scope(
    o: Mapping[str, str],
    streaming: bool | None,
    write_id: str | None,
    batch_id: int | None,
    query_checkpoint: str | None,
    scope: str,
) -> None:
    """``batchId``, ``queryCheckpoint`` and ``writeIdScope`` name the scope of a ``writeId``:
    they need one, ``batchId`` and ``queryCheckpoint`` go together, and a ``global`` scope
    takes neither."""
    named = [n for n in ("batchId", "queryCheckpoint", "writeIdScope") if option(n).given(o)]
    if not named:
        return
    if streaming:
        raise ConfigError(
            f"option {named[0]!r} is for df.write inside foreachBatch (with option writeId); "
            "a streaming query's sink keys its micro-batches itself: drop it"
        )
    if write_id is None:
        raise ConfigError(
            f"option {named[0]!r} names the scope of option writeId, which is not set; set "
            "writeId (the same on every retry of this write) or drop it"
        )
    if scope == "global" and (batch_id is not None or query_checkpoint is not None):
        raise ConfigError(
            "option writeIdScope=global keys the write by writeId alone, but batchId or "
            "queryCheckpoint names a streaming query's batch; drop one or the other"
        )
    if (batch_id is None) != (query_checkpoint is None):
        missing = "queryCheckpoint" if query_checkpoint is None else "batchId"
        raise ConfigError(
            f"option {missing!r} is missing: batchId (foreachBatch's batch_id) and "
            "queryCheckpoint (the query's checkpointLocation) name the batch of a writeId "
            "together"
        )


@dataclass(frozen=True)
class SourceSettings:
    """Every option of the source, checked (``parse_source_settings``)."""

    common: CommonOptions
    # which queues: option queue, queues or queuePattern, one type per mode (selection.py)
    selection: QueueSelection
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
    max_trigger_delay: float = option("maxTriggerDelay").default
    # lost ids (see engine/upkeep/lost.py) fail the query (True) or are logged as a warning
    fail_on_data_loss: bool = option("failOnDataLoss").default
    # count the runs that read a batch without a commit, and move its messages after
    # max_batch_attempts of them (None: the queue's max_delivery_count, at least 2)
    count_deliveries: bool = option("countDeliveries").default
    max_batch_attempts: int | None = None


def parse_source_settings(options: Mapping[str, str]) -> SourceSettings:
    """Check every option of the source; a ConfigError names the option and what is allowed."""
    raw = lowered(options)
    check_known(raw, "source")
    common = _common(raw, "source")
    connection = tuple(sorted((k, str(v)) for k, v in connection_options(raw).items()))
    max_ids = option("maxIdsPerPartition").read(raw)
    given_min = option("minIdsPerPartition").read(raw)
    # A Spark task costs a few hundred ms here; a 1,000-id bucket is far less work than that,
    # so small buckets are grouped by default.
    min_ids = min(DEFAULT_MIN_IDS_PER_PARTITION, max_ids) if given_min is None else given_min
    if min_ids > max_ids:
        raise ConfigError(
            f"option 'minIdsPerPartition' ({min_ids}) must not exceed 'maxIdsPerPartition' ({max_ids})"
        )
    lease = option("leaseTimeout").read(raw)
    consumer_id = option("consumerId").read(raw)
    max_messages = option("maxMessagesPerTrigger").read(raw)
    min_messages = option("minMessagesPerTrigger").read(raw)
    source_checks.check_pacing(min_messages, max_messages, option("maxTriggerDelay").given(raw))
    selection = queue_selection(common.queue, raw)
    start = option("startingPosition").read(raw)
    source_checks.check_several(selection, start, common.create_queue)
    return SourceSettings(
        common=common,
        connection=connection,
        max_messages_per_trigger=max_messages,
        max_ids_per_partition=max_ids,
        min_ids_per_partition=min_ids,
        lease_timeout=lease,
        consumer_id=consumer_id,
        starting_position=start,
        min_messages_per_trigger=min_messages,
        max_trigger_delay=option("maxTriggerDelay").read(raw),
        fail_on_data_loss=option("failOnDataLoss").read(raw),
        count_deliveries=option("countDeliveries").read(raw),
        max_batch_attempts=option("maxBatchAttempts").read(raw),
        selection=selection,
    )


def resolve_queue(conn: Connection, common: CommonOptions, name: str | None = None) -> QueueInfo:
    """The queue ``name`` (default: option 'queue'); created first with ``createQueue=true``."""
    name = name or common.queue
    schema.require_schema(conn)
    if common.create_queue:
        # An existing queue must have every setting whose option was given: one that differs
        # is QueueSettingsMismatchError naming each, never silently ignored.
        return queues.create_queue(
            conn, name, exist_ok=True, compare=common.queue_settings_given, **common.queue_settings
        )
    try:
        return queues.get_queue(conn, name)
    except QueueNotFoundError:
        raise QueueNotFoundError(
            f"queue {name!r} does not exist in keyspace {conn.keyspace!r}; create it "
            f"(cassieq create-queue {name}) or set option createQueue=true"
        ) from None
