"""A streaming source whose driver process is SIGKILLed at random moments while a producer
writes, then drained by a last run, counted (tests/system and tests/long call it with two sizes).

The driver runs in a process group of its own (its JVM and Python workers die with it) with a
fixed ``consumerId``, so each restart takes the lease back at once. Every produced id must be
delivered, and a duplicate can only be the replay of the batch in flight (the same batch id
again)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

from support.stream import wait_for

DRIVER = textwrap.dedent(
    """
    import json, os, sys, uuid
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from cassieq_spark.spark import register

    opts, ck, out, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    def sink(df, batch_id):
        ids = [r.id for r in df.select("id").collect()]
        if ids:
            name = f"{batch_id}-{uuid.uuid4().hex}.json"
            with open(os.path.join(out, "." + name), "w") as f:
                json.dump({"batch": batch_id, "ids": ids}, f)
            os.rename(os.path.join(out, "." + name), os.path.join(out, name))

    reader = spark.readStream.format("cassieq")
    for k, v in opts.items():
        reader = reader.option(k, v)
    w = reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", ck)
    if mode == "drain":
        w.trigger(availableNow=True).start().awaitTermination()
    else:
        w.trigger(processingTime="300 milliseconds").start().awaitTermination()
    """
)


def run_driver_kills(
    queue_client, queue_name: str, cassieq_options: dict, tmp_path, kills_wanted: int
) -> None:
    """``kills_wanted`` driver runs, each SIGKILLed 0-4 s after its first batch, then a drain."""
    queue_client.create_queue(queue_name, bucket_size=100)
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-crash",
        "maxMessagesPerTrigger": "60",
    }
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out = tmp_path / "out"
    out.mkdir()
    ck = tmp_path / "ck"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # the checkout
    produced: list[int] = []
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            produced.extend(queue_client.put_many(queue_name, [b"c"] * 25))
            time.sleep(0.3)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    rng = random.Random()
    kills = 0
    try:
        while kills < kills_wanted:
            before = len(list(out.glob("*.json")))
            proc = subprocess.Popen(
                [sys.executable, str(script), json.dumps(opts), str(ck), str(out), "run"],
                env=env,
                start_new_session=True,  # its own process group: the JVM and workers die with it
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_for(lambda n=before: len(list(out.glob("*.json"))) > n, 180, "a batch")
                time.sleep(rng.uniform(0.0, 4.0))
                assert proc.poll() is None, "the driver died by itself"
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)
            kills += 1
    finally:
        stop.set()
        producer.join(30)
    drain = subprocess.run(
        [sys.executable, str(script), json.dumps(opts), str(ck), str(out), "drain"],
        env=env,
        timeout=600,
        capture_output=True,
    )
    assert drain.returncode == 0, drain.stderr.decode()[-3000:]
    seen: Counter = Counter()
    batches_of: dict[int, set[int]] = {}
    for f in out.glob("*.json"):
        rec = json.loads(f.read_text())
        for i in rec["ids"]:
            seen[i] += 1
            batches_of.setdefault(i, set()).add(rec["batch"])
    assert kills == kills_wanted
    assert set(produced) <= set(seen), f"lost: {sorted(set(produced) - set(seen))[:20]}"
    # a duplicate can only be the replay of the batch in flight: the same batch id again
    assert all(len(batches_of[i]) == 1 for i in seen), "an id came in two different batches"
    st = queue_client.stats(queue_name)
    assert st["backlog"] == 0 and st["reader_pointer"] == st["next_id"] == len(produced)
