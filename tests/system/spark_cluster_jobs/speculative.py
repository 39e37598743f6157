"""Submitted to the Spark standalone cluster by test_spark_cluster.py (not a test module).

A batch write through the cassieq sink whose partition 0 straggles on its first attempt only, with
speculation on: Spark launches a second attempt of that task on the other executor while the first
one still runs, and both write the same partition.
"""

import json
import sys
import time

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.types import StringType

from cassieq_spark.spark import register

STRAGGLE_SECONDS = 25.0


def main() -> None:
    options = json.loads(sys.argv[1])
    queue, rows = options.pop("queue"), int(options.pop("rows"))
    spark = SparkSession.builder.appName("cassieq-cluster-speculation").getOrCreate()
    register(spark)
    middle = rows // 8  # inside partition 0 of 4

    def value(i):
        ctx = TaskContext.get()
        if i == middle and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            time.sleep(STRAGGLE_SECONDS)  # the first attempt hangs half-way through its rows
        return str(i)

    (
        spark.range(rows, numPartitions=4)
        .select(udf(value, StringType())(col("id")).alias("value"))
        .write.format("cassieq")
        .options(**options)
        .option("queue", queue)
        .mode("append")
        .save()
    )
    print("REPORT " + json.dumps({"done": True}), flush=True)  # noqa: T201
    spark.stop()


if __name__ == "__main__":
    main()
