"""Submitted to the Spark standalone cluster by test_spark_cluster.py (not a test module).

Relays every message of one queue into another: the cassieq source (acked on commit) feeds the
cassieq sink, in small slow micro-batches, so that the test can kill an executor mid-batch.
"""

import json
import os
import sys
import tempfile
import time

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType

from cassieq_spark.spark import register


def slowly(value):
    time.sleep(0.02)  # keeps tasks running long enough for the kill to land inside one
    return value.decode()


def main() -> None:
    options = json.loads(sys.argv[1])
    source, target = options.pop("source"), options.pop("target")
    spark = SparkSession.builder.appName("cassieq-cluster-relay").getOrCreate()
    register(spark)
    checkpoint = os.path.join(tempfile.mkdtemp(), "ck")
    query = (
        spark.readStream.format("cassieq")
        .options(**options)
        .option("queue", source)
        .option("maxMessagesPerTrigger", "400")
        .load()
        .repartition(4)
        .select(udf(slowly, StringType())("value").alias("value"))
        .writeStream.format("cassieq")
        .options(**options)
        .option("queue", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("REPORT " + json.dumps({"batches": len(query.recentProgress)}), flush=True)  # noqa: T201
    spark.stop()


if __name__ == "__main__":
    main()
