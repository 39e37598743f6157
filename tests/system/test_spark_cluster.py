"""The connector on a real Spark standalone cluster (a master and 2 workers on 127.0.0.1).

The executors and the driver run in a Python environment where ``cassieq_spark`` is NOT installed
(a fresh venv that sees only the dependencies: pyspark, cassandra-driver, pyarrow); the package
reaches them the way docs/spark-cluster.md tells users: the wheel, renamed ``.zip``,
passed with ``--py-files``. Each test proves from the processes' own report that they imported the
shipped archive, not this checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from support.queues import connection_flags
from support.repair import TIMEOUT, assert_each_once, late_writes

from cassieq_dev.local_spark import LocalSpark, spark_home

pytestmark = pytest.mark.sparkcluster

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = str(ROOT / "cassieq_spark")  # where an import from this checkout would come from
JOBS = Path(__file__).resolve().parent / "spark_cluster_jobs"
MASTER_PORT = 7177  # not the default 7077/8080: a developer's own cluster may run there
WEBUI_PORT = 8180
ROWS = 3000
SUBMIT_TIMEOUT = 600


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> LocalSpark:
    cluster = LocalSpark(
        workers=2,
        worker_cores=1,
        worker_memory="1g",
        master_port=MASTER_PORT,
        webui_port=WEBUI_PORT,
        base_dir=ROOT / ".spark" / "test",
    )
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory) -> str:
    """A venv with the dependencies but without cassieq_spark (no download: a .pth file points at
    this checkout's site-packages, whose editable-install hook a .pth-added path does not run)."""
    env_dir = tmp_path_factory.mktemp("clean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = str(env_dir / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run(
        [python, "-c", "import pyspark, cassandra, pyarrow; import cassieq_spark"],
        cwd=tmp_path_factory.getbasetemp(),
        capture_output=True,
        text=True,
    )
    assert "No module named 'cassieq_spark'" in probe.stderr, probe.stderr
    return python


@pytest.fixture(scope="module")
def shipped_zip(tmp_path_factory) -> Path:
    """The wheel as users build it (`make dist`), renamed .zip for --py-files."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
    )
    [wheel] = out.glob("cassieq_spark-*.whl")
    return Path(shutil.copy(wheel, wheel.with_suffix(".zip")))


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory, shipped_zip) -> Path:
    """A venv with the dependencies and the wheel, packed by venv-pack for ``--archives``. Not
    pyspark: executors and driver take it from SPARK_HOME. Needs pip to reach an index."""
    from importlib.metadata import version

    base = tmp_path_factory.mktemp("packed")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    deps = [
        f"{name}=={version(name)}"
        for name in ("cassandra-driver", "pyarrow", "pandas", "google-re2")
    ]
    installed = subprocess.run([*pip, *deps, "venv-pack"], capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.skip(f"cannot build the packed environment (pip): {installed.stderr[-300:]}")
    wheel = next(shipped_zip.parent.glob("cassieq_spark-*.whl"))
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    archive = base / "env.tar.gz"
    subprocess.run(
        [str(venv / "bin" / "venv-pack"), "-q", "-p", str(venv), "-o", str(archive)], check=True
    )
    return archive


def submit(
    cluster: LocalSpark,
    python: str,
    pyfiles: Path,
    script: Path,
    *args: str,
    cwd: Path,
    wait: bool = True,
    conf: dict[str, str] | None = None,
):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "CASSIEQ_")) and k != "PYTHONPATH"
    }
    # PySpark gives --py-files to executors and to the worker that plans a batch read or write,
    # but not to the driver-side process of a streaming source: it sees the driver's PYTHONPATH.
    env |= {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "PYTHONPATH": str(pyfiles)}
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        cluster.master_url,
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.ui.enabled=false",
        *(arg for key, val in (conf or {}).items() for arg in ("--conf", f"{key}={val}")),
        "--py-files",
        str(pyfiles),
        str(script),
        *args,
    ]
    if not wait:
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT
    )


def test_round_trip_on_the_cluster_with_executors_that_lack_the_package(
    spark_cluster, clean_python, shipped_zip, cassieq_options, queue_client, tmp_path
):
    queue = f"t_{uuid.uuid4().hex[:12]}"
    options = {**cassieq_options, "queue": queue, "rows": str(ROWS)}
    done = submit(
        spark_cluster,
        clean_python,
        shipped_zip,
        JOBS / "roundtrip.py",
        json.dumps(options),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))

    counts = Counter(int(v) for v in report["values"])
    assert set(counts) == set(range(ROWS)), "every row written by the sink is consumed"
    assert max(counts.values()) == 1, "exactly once through sink -> queue -> source"
    stats = report["stats"]
    assert (stats["enqueued"], stats["acked"], stats["backlog"]) == (ROWS, ROWS, 0)

    # Imported from the shipped archive everywhere: the driver, and executors on both workers.
    driver_file, driver_python = report["driver"]
    assert shipped_zip.name in driver_file and driver_python == clean_python
    assert report["executors"], "the probe job ran on the executors"
    for file, python in report["executors"]:
        assert ".zip" in file and CHECKOUT not in file, file
        assert python == clean_python


def test_repair_job_on_the_cluster(
    spark_cluster, clean_python, shipped_zip, cassieq_options, queue_client, tmp_path
):
    name = f"t_{uuid.uuid4().hex[:12]}"
    queue_client.create_queue(name, bucket_size=10, repair_timeout=TIMEOUT)
    queue = queue_client.get_queue(name)
    payloads = late_writes(queue_client, queue, 6)
    done = submit(
        spark_cluster,
        clean_python,
        shipped_zip,
        ROOT / "jobs" / "repair.py",
        *connection_flags(cassieq_options),
        "--queue",
        name,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [summary] = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert summary["republished"] == len(payloads), summary
    assert_each_once(queue_client, queue, payloads)
    queue_client.delete_queue(name)


def test_executor_killed_mid_batch_loses_and_duplicates_nothing(
    spark_cluster, clean_python, shipped_zip, cassieq_options, queue_client, tmp_path
):
    """Source -> slow UDF -> sink on the cluster; worker 1 (its JVM, executor and Python workers)
    is SIGKILLed while a batch's tasks run. Spark re-runs the lost tasks on worker 2: the sink's
    keyed blocks make the rerun rewrite the same ids, the source acks only committed batches."""
    source, target = (f"t_{uuid.uuid4().hex[:12]}" for _ in range(2))
    for name in (source, target):
        queue_client.create_queue(name)
    n = 2000
    for start in range(0, n, 500):
        queue_client.put_many(source, [str(i).encode() for i in range(start, start + 500)])
    options = {**cassieq_options, "source": source, "target": target}
    job = submit(
        spark_cluster,
        clean_python,
        shipped_zip,
        JOBS / "relay.py",
        json.dumps(options),
        cwd=tmp_path,
        wait=False,
    )
    try:
        deadline = time.monotonic() + 300
        while queue_client.stats(target)["enqueued"] < 400:  # past the first batch
            assert job.poll() is None, job.communicate()[1][-4000:]
            assert time.monotonic() < deadline, "the relay made no progress"
            time.sleep(0.2)
        spark_cluster.kill_worker(1)
        out, err = job.communicate(timeout=SUBMIT_TIMEOUT)
    finally:
        if job.poll() is None:
            job.kill()
        spark_cluster.start_worker(1)
    assert job.returncode == 0, err[-4000:]
    assert "Lost task" in err or "lost executor" in err.lower(), "the kill hit no running task"

    delivered = Counter()
    while (msg := queue_client.get(target)) is not None:
        delivered[int(msg.payload)] += 1
        assert queue_client.ack(target, msg.pop_receipt)
    assert set(delivered) == set(range(n)), f"lost: {sorted(set(range(n)) - set(delivered))[:20]}"
    dupes = {k: v for k, v in delivered.items() if v > 1}
    assert not dupes, f"relayed more than once: {dupes}"
    stats = queue_client.stats(source)
    assert (stats["acked"], stats["backlog"], stats["in_flight"]) == (n, 0, 0)


def test_packed_environment_ships_everything(
    spark_cluster, packed_env, cassieq_options, queue_client, tmp_path
):
    """The venv-pack way: executors unpack ``--archives env.tar.gz#env`` and run ./env/bin/python.
    The driver's own data-source workers also run PYSPARK_PYTHON (./env/bin/python) from the
    driver's working directory, so the archive must be unpacked there too (docs/spark-cluster.md)."""
    (tmp_path / "env").mkdir()
    subprocess.run(["tar", "-xzf", str(packed_env), "-C", str(tmp_path / "env")], check=True)
    queue = f"t_{uuid.uuid4().hex[:12]}"
    options = {**cassieq_options, "queue": queue, "rows": "1000"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "CASSIEQ_")) and k != "PYTHONPATH"
    }
    env |= {
        "SPARK_HOME": str(spark_home()),
        "PYSPARK_PYTHON": "./env/bin/python",
        "PYSPARK_DRIVER_PYTHON": "./env/bin/python",
    }
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        spark_cluster.master_url,
        "--conf",
        "spark.executor.memory=512m",
        "--archives",
        f"{packed_env}#env",
        str(JOBS / "roundtrip.py"),
        json.dumps(options),
    ]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    assert sorted(int(v) for v in report["values"]) == list(range(1000))
    assert report["stats"]["acked"] == 1000
    for file, python in report["executors"]:
        # Unpacked by Spark into the executor's work dir, not this checkout or the driver's copy.
        assert "/work/app-" in file and "/env/" in file and CHECKOUT not in file, file
        assert python.endswith("/env/bin/python")


def test_speculative_attempt_writes_each_row_once(
    spark_cluster, clean_python, shipped_zip, cassieq_options, queue_client, tmp_path
):
    """spark.speculation on a real cluster (local mode never speculates): partition 0's first
    attempt hangs half-way through its rows, Spark starts a second attempt of it on the other
    executor, and both write the same partition under the same write id. Every row lands once."""
    queue = f"t_{uuid.uuid4().hex[:12]}"
    queue_client.create_queue(queue)
    n = 2000
    done = submit(
        spark_cluster,
        clean_python,
        shipped_zip,
        JOBS / "speculative.py",
        json.dumps({**cassieq_options, "queue": queue, "rows": str(n)}),
        cwd=tmp_path,
        conf={
            "spark.speculation": "true",
            "spark.speculation.interval": "200ms",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.multiplier": "1.5",
            "spark.speculation.minTaskRuntime": "2s",
        },
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (tmp_path / "spark-submit.err").write_text(done.stderr)  # kept for a failure
    assert "speculatable" in done.stderr, "Spark never speculated: the test proved nothing"
    assert "Starting task 0.1 in stage" in done.stderr, "no second attempt of partition 0 ran"

    delivered = Counter()
    while (msg := queue_client.get(queue)) is not None:
        delivered[int(msg.payload)] += 1
        assert queue_client.ack(queue, msg.pop_receipt)
    assert set(delivered) == set(range(n)), f"lost: {sorted(set(range(n)) - set(delivered))[:20]}"
    dupes = {k: v for k, v in delivered.items() if v > 1}
    assert not dupes, f"written twice: {dupes}"


def test_demo_runs_on_the_cluster(spark_cluster, cassieq_options, tmp_path):
    """`make demo SPARK_MASTER=...`: the main job, unchanged, with its executors on the workers
    (this checkout's venv, as on one machine). Its own end-of-run check must say OK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASSIEQ_")}
    env |= {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "jobs" / "demo.py"),
            "--seconds",
            "10",
            "--rows-per-second",
            "300",
            "--port",
            cassieq_options["port"],
            "--master",
            spark_cluster.master_url,
            "--out",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"Spark master: {spark_cluster.master_url}" in done.stdout
    assert "OK: every enqueued message was delivered and acked" in done.stdout
    apps = (spark_cluster.status() or {}).get("completedapps", [])
    assert any(app.get("name") == "cassieq-demo" for app in apps), apps
