"""Dead letters from inside a query: ``dead_letter(rows, ...)`` turns rows a query rejects
into messages for their queues' dead-letter queues, written by the sink.

The returned DataFrame has the sink's columns: ``value``, ``headers`` (the message's own, plus
its origin queue, origin id, delivery count and the reason, under the same header names the
client's dead-lettering uses) and ``queue`` (the origin queue's dead-letter queue, so the
sink's routing sends each row to the right one, also for a query on several queues). Written
with the sink inside ``foreachBatch`` with a ``writeId`` keyed by the batch (options
``batchId`` and ``queryCheckpoint``), a replayed batch writes each dead letter once; the
originals are acked with the batch, as every delivered message is, so a rejected message ends
up in the dead-letter queue only::

    def process(batch, batch_id):
        bad = batch.where(...).withColumn("reason", ...)
        (dead_letter(bad, reason_col="reason", batch_id=batch_id,
                     query_checkpoint=checkpoint, **conn)
            .write.format("cassieq").options(**conn)
            .option("writeId", "orders-dlq").option("batchId", batch_id)
            .option("queryCheckpoint", checkpoint).mode("append").save())
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..config import ConnectionConfig, connection_from_options
from ..engine.core import queues
from ..engine.store import schema
from ..engine.store.session import shared_connection
from ..engine.upkeep.deadletter import HEADER_DELIVERY_COUNT, HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE
from ..engine.write import records
from ..errors import ConfigError
from .sink_target import query_id_of

HEADER_REASON = "cassieq-reason"
PROVENANCE = (HEADER_ORIGIN_QUEUE, HEADER_ORIGIN_ID, HEADER_DELIVERY_COUNT, HEADER_REASON)
NEEDED = ("id", "value")
# Integer types an id can come in (the source's is bigint); a string id is not a message's.
_ID_TYPES = ("bigint", "int", "smallint", "tinyint")

__all__ = ["HEADER_REASON", "dead_letter"]


def dead_letter(
    rows: DataFrame,
    reason_col: str = "reason",
    queue: str | None = None,
    *,
    batch_id: int | None = None,
    query_checkpoint: str | None = None,
    **options: Any,
) -> DataFrame:
    """``rows``: rows of the cassieq source (``id``, ``value``, and ``headers``,
    ``delivery_count``, ``queue`` if present) with a reason column ``reason_col``; ``queue``:
    their origin queue when ``rows`` has no ``queue`` column; ``options``: the connection
    options (as for the sink; any other name is an error), used to look up each queue's
    dead-letter queue. A row whose queue has no dead-letter queue fails the write with a
    message naming it. The arguments are checked before anything is read.

    ``batch_id`` and ``query_checkpoint`` (both or neither; inside ``foreachBatch``: its
    ``batch_id`` and the query's ``checkpointLocation``) fix the dead-letter queues per batch:
    the first call for a batch records the settings it read, and a replay of the batch uses
    those, so it routes each row as the first attempt did even if a queue's dead-letter queue
    was changed in between (the record lives 14 days, as the sink's replay keys)."""
    if not isinstance(reason_col, str) or not reason_col:
        hint = (
            " (a Column is not taken: add it as a column, rows.withColumn('reason', ...), and "
            "name that)"
            if isinstance(reason_col, Column)
            else ""
        )
        raise ConfigError(
            f"dead_letter's reason_col must be the name of a column of rows, got "
            f"{_show(reason_col)}{hint}"
        )
    if queue is not None and not isinstance(queue, str):
        raise ConfigError(f"dead_letter's queue must be a queue name or None, got {_show(queue)}")
    if (batch_id is None) != (query_checkpoint is None):
        raise ConfigError(
            "dead_letter's batch_id and query_checkpoint go together (foreachBatch's batch_id "
            "and the query's checkpointLocation); give both or neither"
        )
    if batch_id is not None and (
        not isinstance(batch_id, int) or isinstance(batch_id, bool) or batch_id < 0
    ):
        raise ConfigError(f"dead_letter's batch_id must be an integer >= 0, got {_show(batch_id)}")
    if query_checkpoint is not None and not isinstance(query_checkpoint, str):
        raise ConfigError(
            f"dead_letter's query_checkpoint must be a path, got {_show(query_checkpoint)}"
        )
    config = connection_from_options({k: str(v) for k, v in options.items()}, known_only=True)
    if not isinstance(rows, DataFrame):
        raise ConfigError(
            f"dead_letter takes a DataFrame of rows of the cassieq source, got "
            f"{type(rows).__name__}"
        )
    cols = set(rows.columns)
    missing = [c for c in (*NEEDED, reason_col) if c not in cols]
    if missing:
        raise ConfigError(
            f"dead_letter needs the column(s) {', '.join(missing)}: rows as the cassieq "
            f"source yields them (id, value, headers, delivery_count, queue) and the reason "
            f"column {reason_col!r} (argument reason_col)"
        )
    if "queue" not in cols and queue is None:
        raise ConfigError(
            "dead_letter needs the origin queue: a 'queue' column (the source has one) or the "
            "argument queue='...'"
        )
    id_type = dict(rows.dtypes)["id"]
    if id_type not in _ID_TYPES:
        raise ConfigError(
            f"dead_letter's column 'id' must be the source's message id (bigint), got {id_type}: "
            "rows not read from a cassieq queue have no id to trace back; cast it or use the "
            "source's rows"
        )
    origin = F.col("queue") if "queue" in cols else F.lit(queue)
    if "queue" in cols and queue is not None:
        origin = F.coalesce(F.col("queue"), F.lit(queue))
    scope = None
    if batch_id is not None and query_checkpoint is not None:
        scope = f"{query_id_of(query_checkpoint)}:{batch_id}"
    dlq = _dead_letter_queues(config, scope)
    target = F.element_at(dlq, origin) if dlq is not None else F.lit(None).cast("string")
    target = F.when(
        target.isNull(),
        F.raise_error(
            F.concat(
                F.lit("dead_letter: queue "),
                F.coalesce(origin, F.lit("(null)")),
                F.lit(
                    " has no dead-letter queue (or does not exist); create it with "
                    "dead_letter_queue=... (cassieq create-queue --dead-letter-queue)"
                ),
            )
        ),
    ).otherwise(target)
    own = F.col("headers") if "headers" in cols else F.create_map().cast("map<string,string>")
    own = F.map_filter(F.coalesce(own, F.create_map()), lambda k, _v: ~k.isin(*PROVENANCE))
    count = F.col("delivery_count") if "delivery_count" in cols else F.lit(0)
    provenance = F.create_map(
        F.lit(HEADER_ORIGIN_QUEUE),
        origin,
        F.lit(HEADER_ORIGIN_ID),
        F.col("id").cast("string"),
        F.lit(HEADER_DELIVERY_COUNT),
        F.coalesce(count, F.lit(0)).cast("string"),
        F.lit(HEADER_REASON),
        F.coalesce(F.col(reason_col).cast("string"), F.lit("")),
    )
    return rows.select(
        F.col("value"),
        F.map_concat(own, provenance).alias("headers"),
        target.alias("queue"),
    )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _dead_letter_queues(config: ConnectionConfig, scope: str | None) -> Column | None:
    """Every queue's dead-letter queue, as a map column (one read of the queue table); with
    ``scope`` (query id:batch id) the ones the batch's first call recorded."""
    conn = shared_connection(config)
    schema.require_schema(conn)
    pairs = [(q.name, q.dead_letter_queue) for q in queues.list_queues(conn) if q.dead_letter_queue]
    if scope is not None:
        text = records.first_text(
            conn, records.DEAD_LETTER_ROUTES, f"dlq:{scope}", json.dumps(sorted(pairs))
        )
        pairs = [(str(a), str(b)) for a, b in json.loads(text)]
    if not pairs:
        return None
    return F.create_map(*[F.lit(x) for pair in pairs for x in pair])
