"""Submitted to the Spark standalone cluster by test_spark_cluster.py (not a test module).

Writes N rows through the cassieq sink, consumes them through the streaming source (AvailableNow,
acked on commit), and reports on stdout, as one JSON line, the values seen and which file each
Python process imported cassieq_spark from (driver and executors).
"""

import json
import os
import sys
import tempfile

from pyspark.sql import SparkSession

import cassieq_spark
from cassieq_spark import QueueClient
from cassieq_spark.spark import register


def where_imported(_: object) -> tuple[str, str]:
    import cassieq_spark as shipped

    return shipped.__file__, sys.executable


def main() -> None:
    options = json.loads(sys.argv[1])
    queue, rows = options.pop("queue"), int(options.pop("rows"))
    spark = SparkSession.builder.appName("cassieq-cluster-roundtrip").getOrCreate()
    register(spark)
    with QueueClient.from_options(options) as client:
        client.create_queue(queue, exist_ok=True)

    executors = spark.sparkContext.parallelize(range(4), 4).map(where_imported).distinct().collect()
    (
        spark.range(rows, numPartitions=4)
        .selectExpr("CAST(id AS STRING) AS value")
        .write.format("cassieq")
        .options(**options)
        .option("queue", queue)
        .mode("append")
        .save()
    )
    seen: list[str] = []

    def collect(batch, _batch_id):  # runs on the driver
        seen.extend(r.value.decode() for r in batch.select("value").collect())

    query = (
        spark.readStream.format("cassieq")
        .options(**options)
        .option("queue", queue)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", os.path.join(tempfile.mkdtemp(), "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    with QueueClient.from_options(options) as client:
        stats = client.stats(queue)
    report = {
        "values": seen,
        "driver": [cassieq_spark.__file__, sys.executable],
        "executors": executors,
        "stats": {k: v for k, v in stats.items() if isinstance(v, int)},
    }
    print("REPORT " + json.dumps(report), flush=True)  # noqa: T201
    spark.stop()


if __name__ == "__main__":
    main()
