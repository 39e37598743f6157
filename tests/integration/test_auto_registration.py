"""``format("cassieq")`` without ``register(spark)``: PySpark 4 finds the ``pyspark_cassieq``
package by itself. Run in a new Python process that imports nothing from this project, so that
nothing registers the source behind the test's back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    opts = json.loads(sys.argv[1])
    ckpt = sys.argv[2]
    spark = SparkSession.builder.master("local[1]").appName("auto-registration").getOrCreate()
    assert not [m for m in sys.modules if m.startswith(("cassieq_spark", "pyspark_cassieq"))]
    spark.createDataFrame([("a",), ("b",), ("c",)], "value string").write.format(
        "cassieq"
    ).options(**opts).mode("append").save()
    text = lambda rows: sorted(bytes(r.value).decode() for r in rows)
    batch = text(spark.read.format("cassieq").options(**opts).load().collect())
    stream = (
        spark.readStream.format("cassieq").options(**opts).load()
        .writeStream.format("memory").queryName("got")
        .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    )
    stream.awaitTermination(120)
    streamed = text(spark.sql("select value from got").collect())
    imported = sorted(m for m in sys.modules if m.startswith(("cassieq_spark", "pyspark_cassieq")))
    print(json.dumps({"batch": batch, "stream": streamed, "imported": imported}))
    spark.stop()
    """
)


def test_format_cassieq_works_in_a_fresh_session_without_register(
    queue_client, queue_name, cassieq_options, tmp_path
) -> None:
    queue_client.create_queue(queue_name)
    opts = {**cassieq_options, "queue": queue_name}
    # As in an activated virtualenv: Spark's JVM runs the lookup with PYSPARK_PYTHON, else with
    # the `python3` on PATH, which must be an interpreter that has this package installed.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONSTARTUP"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(opts), str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["batch"] == ["a", "b", "c"]
    assert result["stream"] == ["a", "b", "c"]
    assert result["imported"] == []  # the driver process never imported the package itself
    # The stream acked what it read (its lease keeps client consumers away, so ask the stats).
    stats = queue_client.stats(queue_name)
    assert (stats["backlog"], stats["in_flight"]) == (0, 0), stats
