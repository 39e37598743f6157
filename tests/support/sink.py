"""The sink side of a Spark test: the rows a queue holds (read straight from the messages table,
so a duplicate or a half-written task shows whether or not a consumer would deliver it), a lost
commit, text files for a file stream, and an availableNow write into a queue."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from cassieq_spark.engine.core import messages, monoton

# headers as canonical JSON text: Spark cannot sort (so chispa cannot compare) map columns
READ_SCHEMA = StructType([StructField("value", BinaryType()), StructField("headers", StringType())])


TIMEOUT = 240


def stored_rows(client, queue: str, include_dead: bool = False) -> list:
    """Every message row of the queue (live ones only unless asked), in id order."""
    info = client.get_queue(queue)
    end = monoton.horizon(client.conn, info, 0).next_id
    rows = messages.read_range(client.conn, info, 0, end)
    return [r for r in rows if include_dead or not r.dead]


def drop_last_commit(ckpt: Path) -> int:
    """A crash after the sink wrote the last batch but before Spark logged its commit."""
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    crc = ckpt / "commits" / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


def stored_df(spark, client, queue: str):
    rows = [
        (bytes(r.payload), dict(r.headers) if r.headers else None)
        for r in stored_rows(client, queue)
    ]
    return spark.createDataFrame(rows, READ_SCHEMA)


def expected_df(spark, values: list[str], headers=None):
    rows = [(v.encode(), headers[i] if headers is not None else None) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, READ_SCHEMA)


def full_message(exc: BaseException) -> str:
    """The error text with the JVM cause chain (a streaming failure wraps the task's error)."""
    parts = [str(exc)]
    java = getattr(exc, "_origin", None)
    while java is not None:
        parts.append(str(java.toString()))
        java = java.getCause()
    return "\n".join(parts)


def write_text_files(directory: Path, files: dict[str, list[str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        tmp = directory / f".{name}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(directory / name)  # the file source must never see a half-written file


def run_available_now(spark, options: dict, queue: str, src: Path, checkpoint: Path, **extra):
    df = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(src))
    query = (
        df.writeStream.format("cassieq")
        .options(**options)
        .option("queue", queue)
        .options(**extra)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT), "streaming query did not finish in time"
    assert query.exception() is None, query.exception()
    return query
