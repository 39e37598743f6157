"""Run by test_spark_connect.py as a Spark Connect client (not a test module): its own process,
because a Connect session marks the whole process as Connect mode (a classic session of the
same pytest process would then fail to start).

Over one ``sc://`` session: a JSON file source -> the cassieq sink (AvailableNow), a batch read
of the queue, the cassieq source (AvailableNow, in several batches, acked on commit) -> a memory
sink, with the lag listener added on the client. Prints one ``REPORT {json}`` line: the values
the source delivered, what the batch read saw, the lag records the client's listener got.
"""

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from cassieq_spark.spark import is_connect, lag_listener


def main() -> None:
    url, work = sys.argv[1], Path(sys.argv[2])
    options = json.loads(sys.argv[3])
    queue, rows = options.pop("queue"), int(options.pop("rows"))
    spark = SparkSession.builder.remote(url).getOrCreate()
    assert is_connect(spark), type(spark)

    source_dir = work / "in"
    source_dir.mkdir(parents=True)
    for part in range(2):
        with open(source_dir / f"part-{part}.json", "w") as out:
            for i in range(part * rows // 2, (part + 1) * rows // 2):
                out.write(json.dumps({"value": str(i), "n": i}) + "\n")
    # The sink: format("cassieq") found on the server by itself (no register()).
    sink = (
        spark.readStream.format("json")
        .schema("value string, n long")
        .load(str(source_dir))
        .selectExpr("value", "map('n', cast(n as string)) AS headers")
        .writeStream.format("cassieq")
        .options(**options)
        .option("queue", queue)
        .option("checkpointLocation", str(work / "sink-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    sink.awaitTermination(600)
    assert sink.exception() is None, sink.exception()

    batch = spark.read.format("cassieq").options(**options).option("queue", queue).load()
    batch_values = [r.value.decode() for r in batch.select("value").collect()]

    lag = lag_listener()
    spark.streams.addListener(lag)
    try:
        name = "delivered_" + queue
        source = (
            spark.readStream.format("cassieq")
            .options(**options)
            .option("queue", queue)
            .option("maxMessagesPerTrigger", str(rows // 2 + rows // 4))
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(work / "source-checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        source.awaitTermination(600)
        assert source.exception() is None, source.exception()
        delivered = spark.table(name).select("value", "headers").collect()
        # The client's listener gets the events asynchronously: wait for the last batch's.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(r.behind == 0 for r in lag.of(queue)):
            time.sleep(0.2)
    finally:
        # A client-side listener runs a thread that keeps the process alive until removed.
        spark.streams.removeListener(lag)
    report = {
        "values": [r.value.decode() for r in delivered],
        "headers_match": all(r.headers.get("n") == r.value.decode() for r in delivered),
        "batch_values": batch_values,
        "lag": [[r.batch_id, r.behind] for r in lag.of(queue)],
    }
    spark.stop()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
