"""The Spark Cassandra Connector side of the bench's ``scc`` suite; runs under PySpark 3.5.

Started by ``bench/scc_suite.py`` with the side virtualenv's Python (.cassandra/bench-scc/venv),
never imported by the bench itself; it stays up for the whole run so that its measurements can
be interleaved with the sink's and the source's repeats. In ``local[2]`` it writes the sink
suite's rows (``id``, ``bucket = id // 1000``, ``value`` of 100 B / 1 KiB, from a parquet input
of one file per task slot) into plain tables ``(bucket int, id bigint, value blob, PRIMARY KEY
(bucket, id))`` that the caller created, with ``df.write.format("org.apache.spark.sql.cassandra")``
(the connector's default write settings, or tuned), and counts each table afterwards; and reads a
table back in full (every row's ``value`` materialised: ``count(id)`` and ``sum(length(value))``
in one pass), checking the count. Stdout carries only JSON lines: one when ready, then one reply
per command read from stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

TUNED = {
    "spark.cassandra.output.batch.grouping.key": "partition",
    "spark.cassandra.output.concurrent.writes": "10",
    "spark.cassandra.output.batch.size.bytes": "4096",
}
FORMAT = "org.apache.spark.sql.cassandra"


def _artifact(jar: str) -> str:
    """``commons-lang3-3.10.jar`` -> ``commons-lang3`` (the name without its version)."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)*\.jar$", "", os.path.basename(jar))


def connector_jars(jars_dir: str) -> list[str]:
    """The resolved jars minus those PySpark already ships (another version of the same artifact
    on the classpath, e.g. slf4j-api or commons-lang3, would clash with Spark's own)."""
    import pyspark

    shipped = {
        _artifact(j) for j in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    }
    jars = sorted(os.path.join(jars_dir, j) for j in os.listdir(jars_dir) if j.endswith(".jar"))
    return [j for j in jars if _artifact(j) not in shipped]


def session(args, jars):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{args.processes}]")
        .appName("cassieq-bench-scc")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(args.processes))
        .config("spark.cassandra.connection.host", args.host)
        .config("spark.cassandra.connection.port", str(args.port))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def make_input(spark, path, n, size, parts):
    """The sink suite's rows: ``value`` = the id, ':' and filler, cut to exactly ``size`` bytes."""
    (
        spark.range(n, numPartitions=parts)
        .selectExpr(
            "cast(id div 1000 as int) as bucket",
            "id",
            f"cast(substring(concat(cast(id as string), ':', repeat('x', {size})), 1, {size}) "
            "as binary) as value",
        )
        .write.mode("overwrite")
        .parquet(path)
    )


def table_df(spark, args, table):
    return spark.read.format(FORMAT).options(keyspace=args.keyspace, table=table).load()


def write(spark, args, path, table, n, settings):
    """Timed write of the parquet input into ``table``, then the table counted (untimed)."""
    df = spark.read.parquet(path)
    w = df.write.format(FORMAT).mode("append").options(keyspace=args.keyspace, table=table)
    for k, v in settings.items():
        w = w.option(k, v)
    t0 = time.perf_counter()
    w.save()
    secs = time.perf_counter() - t0
    counted = table_df(spark, args, table).count()
    if counted != n:
        raise SystemExit(f"scc write into {table}: {counted} rows in the table, expected {n}")
    return {"table": table, "seconds": secs, "rate": n / secs, "rows_in_table": counted}


def read(spark, args, table, n, size):
    """Timed full read: every row's id and value through the JVM, counted in the same pass."""
    from pyspark.sql import functions as F

    df = table_df(spark, args, table)
    t0 = time.perf_counter()
    row = df.agg(F.count("id").alias("rows"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    secs = time.perf_counter() - t0
    if row["rows"] != n or row["bytes"] != n * size:
        raise SystemExit(
            f"scc read of {table}: {row['rows']} rows / {row['bytes']} B, expected {n} / {n * size}"
        )
    return {
        "table": table,
        "seconds": secs,
        "rate": n / secs,
        "rows": row["rows"],
        "partitions": df.rdd.getNumPartitions(),
    }


def serve(spark, args, work):
    """One JSON command per stdin line, one JSON reply per stdout line, until ``quit``:
    ``{"op": "write", "size": 100, "mode": "tuned", "table": ...}`` (the parquet input of a size
    is made, untimed, on its first write) and ``{"op": "read", "size": 100, "table": ...}``."""
    inputs = {}
    n = args.rows
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            return
        size = int(cmd["size"])
        try:
            if cmd["op"] == "write":
                if size not in inputs:
                    inputs[size] = f"{work}/in-{size}"
                    make_input(spark, inputs[size], n, size, args.processes)
                settings = TUNED if cmd["mode"] == "tuned" else {}
                reply = write(spark, args, inputs[size], cmd["table"], n, settings)
            else:
                reply = read(spark, args, cmd["table"], n, size)
        except SystemExit as exc:  # a count that is off: the caller fails the suite
            reply = {"error": str(exc)}
        print(json.dumps(reply), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jars-dir", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9042)
    ap.add_argument("--keyspace", required=True)
    ap.add_argument("--warm-table", required=True, help="a table for the untimed warm-up")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)
    import pyspark

    jars = connector_jars(args.jars_dir)
    t0 = time.perf_counter()
    spark = session(args, jars)
    work = tempfile.mkdtemp(prefix="bench-scc-")
    try:
        # Untimed warm-up: JIT, the connector's session and prepared statements.
        make_input(spark, f"{work}/warm", 2000, 100, args.processes)
        write(spark, args, f"{work}/warm", args.warm_table, 2000, TUNED)
        read(spark, args, args.warm_table, 2000, 100)
        ready = {
            "ready": True,
            "pyspark": pyspark.__version__,
            "python": sys.version.split()[0],
            "jars": [os.path.basename(j) for j in jars],
            "session_seconds": time.perf_counter() - t0,
            "tuned_settings": TUNED,
        }
        print(json.dumps(ready), flush=True)
        serve(spark, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
