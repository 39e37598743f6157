"""Run by test_spark_connect.py as a Spark Connect client (not a test module): the connector's
errors as a Connect client sees them. Prints one ``REPORT {json}`` line mapping each case to
the error's class name and message."""

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from cassieq_spark.spark import register


def main() -> None:
    url, work = sys.argv[1], Path(sys.argv[2])
    options = json.loads(sys.argv[3])
    queue = options.pop("queue")
    spark = SparkSession.builder.remote(url).getOrCreate()
    register(spark, short_errors=True)
    seen: dict[str, list[str]] = {}

    def attempt(case: str, action) -> None:
        try:
            action()
            seen[case] = ["", "no error"]
        except Exception as exc:  # the client's exception, whatever its class
            seen[case] = [type(exc).__name__, str(exc)]

    bad_port = spark.read.format("cassieq").options(**{**options, "port": "abc"})
    lazy = bad_port.option("queue", queue).load()  # over Connect load() sends nothing yet
    attempt("batch read, bad port", lazy.collect)
    attempt(
        "batch write, misspelt option",
        lambda: (
            spark.range(3)
            .selectExpr("CAST(id AS STRING) AS value")
            .write.format("cassieq")
            .options(**options)
            .option("queue", queue)
            .option("writerTyp", "unkeyed")
            .mode("append")
            .save()
        ),
    )
    attempt(
        "stream start, bad port",
        lambda: (
            spark.readStream.format("cassieq")
            .options(**{**options, "port": "abc"})
            .option("queue", queue)
            .load()
            .writeStream.format("memory")
            .queryName("never")
            .option("checkpointLocation", str(work / "bad-port"))
            .start()
        ),
    )
    attempt("sparkContext", lambda: spark.sparkContext)
    spark.stop()
    print("REPORT " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
