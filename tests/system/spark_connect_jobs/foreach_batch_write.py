"""Run by test_spark_connect.py as a Spark Connect client (not a test module).

A cassieq source -> ``foreachBatch`` that writes each batch with ``df.write`` and a constant
``writeId`` to another queue, two batches of equal rows in a row (``maxMessagesPerTrigger=2``
over ``same-a, same-b`` three times), AvailableNow. Over Connect every action of the batch
function is a request of its own, so the sink cannot see the query and batch: first with
options ``batchId`` and ``queryCheckpoint`` naming them (every batch writes its rows), then
with the ``writeId`` alone (refused). Prints one ``REPORT {json}`` line.
"""

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from cassieq_spark.spark import is_connect


def main() -> None:
    url, work = sys.argv[1], Path(sys.argv[2])
    options = json.loads(sys.argv[3])
    queues = options.pop("queues")  # {"scoped": [src, dst], "bare": [src, dst]}
    spark = SparkSession.builder.remote(url).getOrCreate()
    assert is_connect(spark), type(spark)

    def run(name: str, scoped: bool) -> str | None:
        checkpoint = str(work / name)
        src, dst = queues[name]

        def each(df, batch_id):
            w = (
                df.select("value")
                .write.format("cassieq")
                .options(**options)
                .option("queue", dst)
                .option("writeId", "orders-dlq")
            )
            if scoped:
                w = w.option("batchId", batch_id).option("queryCheckpoint", checkpoint)
            w.mode("append").save()

        q = (
            spark.readStream.format("cassieq")
            .options(**options)
            .option("queue", src)
            .option("maxMessagesPerTrigger", "2")
            .option("consumerId", f"{src}-{name}")
            .load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(600)
        except Exception as exc:  # the query failed: awaitTermination raises its error
            return str(exc)
        error = q.exception()
        return None if error is None else str(error)

    report = {"scoped": run("scoped", True), "bare": run("bare", False)}
    spark.stop()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
