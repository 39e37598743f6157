"""A node with password authentication and TLS (started by the launcher for these tests): clear
one-line failures, a least-privilege app role, passwords from files, and a password that shows up
nowhere a user or operator can look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cassieq_dev.local_cassandra import STATE_DIR, LocalCassandra
from cassieq_spark import ConnectionFailedError, QueueClient
from cassieq_spark.errors import ConfigError, PermissionDeniedError

pytestmark = pytest.mark.security

ROOT = Path(__file__).resolve().parents[2]
# Below Linux's ephemeral range (32768-60999): a port there can be taken at any moment as the
# local end of some outgoing connection, and the node then fails to bind it.
PORT, STORAGE_PORT = 22042, 22000
KEYSPACE = "cassieq_secured"
APP_ROLE = "cassieq_app"
# Distinctive, so that any hit in a log, plan or report is this password and nothing else.
APP_PASSWORD = "Zq7-app-SECRET-p4ss-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def secured() -> Iterator[LocalCassandra]:
    node = LocalCassandra(
        port=PORT,
        storage_port=STORAGE_PORT,
        base_dir=STATE_DIR / "secured-test",
        auth=True,
        tls="on",
    )
    node.start()
    yield node
    node.stop_started_here()


@pytest.fixture(scope="module")
def admin_options(secured: LocalCassandra) -> dict[str, str]:
    return {**secured.client_options(), "keyspace": KEYSPACE}


@pytest.fixture(scope="module")
def app_options(secured, admin_options, tmp_path_factory) -> dict[str, str]:
    """The app role's options, its password in a file (as a user should give it)."""
    password_file = tmp_path_factory.mktemp("secret") / "app-password"
    password_file.write_text(APP_PASSWORD + "\n")
    password_file.chmod(0o600)
    with QueueClient.from_options(admin_options) as admin:
        admin.bootstrap(create_keyspace=True, app_role=APP_ROLE, app_password=APP_PASSWORD)
    options = {k: v for k, v in admin_options.items() if k not in ("username", "password")}
    return {**options, "username": APP_ROLE, "passwordFile": str(password_file)}


def _fails(options: dict[str, str], error: type[Exception]) -> str:
    started = time.monotonic()
    with pytest.raises(error) as info, QueueClient.from_options(options) as client:
        client.list_queues()
    assert time.monotonic() - started < 15
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_every_connection_mistake_is_one_line_naming_host_and_cause(
    secured, admin_options, cassieq_options, tmp_path
) -> None:
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
         str(tmp_path / "k"), "-out", str(other_ca), "-days", "1", "-subj", "/CN=other"],
        check=True, capture_output=True,
    )  # fmt: skip
    host = f"127.0.0.1:{PORT}"
    plain = {k: v for k, v in admin_options.items() if not k.startswith("ssl")}
    cases = [
        ({**admin_options, "password": "wrong"}, "rejected the credentials"),
        ({**admin_options, "username": "nobody"}, "rejected the credentials"),
        (plain, "requires TLS resets plaintext clients"),
        ({**admin_options, "sslCaFile": str(other_ca)}, "not signed by a CA in sslCaFile"),
    ]
    for options, cause in cases:
        message = _fails(options, ConnectionFailedError)
        assert host in message and cause in message, message
    # A TLS client against the plaintext node of the other tests.
    to_plain = {**cassieq_options, "ssl": "true", "sslCaFile": str(secured.tls_dir / "ca.pem")}
    message = _fails(to_plain, ConnectionFailedError)
    assert "does not speak TLS" in message and cassieq_options["port"] in message, message
    for option in ("sslCaFile", "sslCertFile"):
        message = _fails({**admin_options, option: str(tmp_path / "missing.pem")}, ConfigError)
        assert option in message and "does not exist" in message, message
    message = _fails({**admin_options, "passwordFile": str(tmp_path / "nope")}, ConfigError)
    assert "passwordFile" in message


def test_the_app_role_does_everything_but_schema_changes(app_options, admin_options) -> None:
    queue = f"q_{uuid.uuid4().hex[:10]}"
    with QueueClient.from_options(app_options) as app:
        app.create_queue(queue)  # queues are rows: MODIFY is enough
        ids = app.put_many(queue, [b"a", b"b"])
        got = [app.get(queue), app.get(queue)]
        assert sorted(m.id for m in got if m) == ids
        assert all(app.ack(queue, m.pop_receipt) for m in got if m)
        assert app.stats(queue)["acked"] == 2
        app.repair(queue)
        app.delete_queue(queue)
    # A schema change (here: creating another keyspace) needs an admin.
    other = {**app_options, "keyspace": "cassieq_not_yet"}
    denied = pytest.raises(PermissionDeniedError, match=r"'cassieq_app' may not change the schema")
    with QueueClient.from_options(other) as app, denied:
        app.bootstrap(create_keyspace=True)
    # The grants are exactly SELECT and MODIFY.
    with QueueClient.from_options(admin_options) as admin:
        rows = admin.conn.session.execute(f"LIST ALL PERMISSIONS OF {APP_ROLE}")
        assert sorted(r.permission for r in rows) == ["MODIFY", "SELECT"]


def test_cli_takes_the_password_from_a_file_and_fails_in_one_line(app_options) -> None:
    flags = [
        "--contact-points", "127.0.0.1", "--port", str(PORT), "--keyspace", KEYSPACE,
        "--username", APP_ROLE, "--password-file", app_options["passwordFile"],
        "--ssl", "true", "--ssl-ca-file", app_options["sslCaFile"],
    ]  # fmt: skip
    cli = [sys.executable, "-m", "cassieq_spark", *flags]
    ok = subprocess.run([*cli, "list-queues"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    json.loads(ok.stdout)
    at = cli.index("--keyspace") + 1
    other = [*cli[:at], "cassieq_not_yet", *cli[at + 1 :]]
    denied = subprocess.run(
        [*other, "bootstrap", "--create-keyspace"], capture_output=True, text=True, timeout=60
    )
    assert denied.returncode == 1
    assert denied.stderr.count("\n") == 1 and "Traceback" not in denied.stderr, denied.stderr
    assert "may not change the schema" in denied.stderr
    env = {**os.environ, "CASSIEQ_PASSWORD": APP_PASSWORD}
    by_env = [a for a in cli if a not in ("--password-file", app_options["passwordFile"])]
    assert subprocess.run([*by_env, "list-queues"], env=env, capture_output=True).returncode == 0


SPARK_JOB = textwrap.dedent(
    """
    import json, logging, sys
    from pyspark.sql import SparkSession

    opts, work = json.loads(sys.argv[1]), sys.argv[2]
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    # py4j's DEBUG log echoes every gateway command, option values included (docs/security.md).
    logging.getLogger("py4j").setLevel(logging.INFO)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", work + "/events")
             .getOrCreate())
    spark.sparkContext.setLogLevel("DEBUG")
    spark.createDataFrame([(str(i),) for i in range(50)], "value string").write.mode(
        "overwrite").json(work + "/in")
    rows = spark.readStream.schema("value string").json(work + "/in")
    sink = (rows.writeStream.format("cassieq").options(**opts)
            .option("checkpointLocation", work + "/sink").trigger(availableNow=True).start())
    sink.awaitTermination(300)
    print("SINK-PROGRESS", json.dumps([p.json for p in sink.recentProgress]))
    source = spark.readStream.format("cassieq").options(**opts).load()
    source.explain(True)
    query = (source.writeStream.format("memory").queryName("got")
             .option("checkpointLocation", work + "/source").trigger(availableNow=True).start())
    query.awaitTermination(300)
    print("SOURCE-PROGRESS", query.lastProgress.json, [p.json for p in query.recentProgress])
    got = [bytes(r.value).decode() for r in spark.sql("select value from got").collect()]
    print("RESULT", json.dumps(sorted(got, key=int)))
    spark.stop()
    """
)


def _leaks(text: str) -> int:
    return text.count(APP_PASSWORD)


def test_spark_round_trip_and_repair_with_the_app_role_over_tls_leak_nothing(
    app_options, tmp_path
) -> None:
    queue = f"q_{uuid.uuid4().hex[:10]}"
    with QueueClient.from_options(app_options) as app:
        app.create_queue(queue)
    # The password given inline (the worst case): it must still show up nowhere.
    options = {k: v for k, v in app_options.items() if k != "passwordFile"}
    options.update(password=APP_PASSWORD, queue=queue)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    (tmp_path / "events").mkdir()
    job = subprocess.run(
        [sys.executable, "-c", SPARK_JOB, json.dumps(options), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-4000:]
    result = [line for line in job.stdout.splitlines() if line.startswith("RESULT ")]
    assert json.loads(result[0][7:]) == [str(i) for i in range(50)]  # each row exactly once
    assert "== Physical Plan ==" in job.stdout and "SOURCE-PROGRESS" in job.stdout
    assert "DEBUG" in job.stderr  # the logs really were verbose
    assert _leaks(job.stdout) == 0, "password in explain() or progress"
    assert _leaks(job.stderr) == 0, "password in a log line"
    events = [p for p in (tmp_path / "events").rglob("*") if p.is_file()]
    assert events and sum(_leaks(p.read_text(errors="replace")) for p in events) == 0
    repair = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "repair.py"), "--contact-points", "127.0.0.1",
         "--port", str(PORT), "--keyspace", KEYSPACE, "--username", APP_ROLE,
         "--password", APP_PASSWORD, "--ssl", "true", "--ssl-ca-file", app_options["sslCaFile"],
         "--queue", queue, "--verbose"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert repair.returncode == 0, repair.stderr[-3000:]
    assert _leaks(repair.stdout) == 0 and _leaks(repair.stderr) == 0
    assert json.loads(repair.stdout.strip().splitlines()[-1])


def test_spark_fails_at_load_in_one_line_and_reads_the_password_file(
    spark, app_options, tmp_path
) -> None:
    queue = f"q_{uuid.uuid4().hex[:10]}"
    with QueueClient.from_options(app_options) as app:
        app.create_queue(queue)
        app.put(queue, b"hello")
    inline = {k: v for k, v in app_options.items() if k != "passwordFile"}
    wrong = {**inline, "password": APP_PASSWORD + "-wrong", "queue": queue}
    with pytest.raises(Exception) as info:
        spark.read.format("cassieq").options(**wrong).load().collect()
    text = str(info.value)
    assert f"127.0.0.1:{PORT}" in text and "rejected the credentials" in text
    assert APP_PASSWORD not in text  # not even the wrong password's prefix is echoed
    rows = spark.read.format("cassieq").options(**app_options, queue=queue).load().collect()
    assert [bytes(r.value) for r in rows] == [b"hello"]  # passwordFile as a Spark option


def test_mutual_tls_needs_the_client_certificate(tmp_path) -> None:
    node = LocalCassandra(
        port=PORT + 1,
        storage_port=STORAGE_PORT + 1,
        base_dir=STATE_DIR / "secured-mutual-test",
        tls="mutual",
    )
    node.start()
    try:
        options = node.client_options()
        assert {"sslCertFile", "sslKeyFile"} <= set(options)
        with QueueClient.from_options(options) as client:
            assert client.conn.session.execute("SELECT key FROM system.local").one()
        without = {k: v for k, v in options.items() if k not in ("sslCertFile", "sslKeyFile")}
        message = _fails(without, ConnectionFailedError)
        assert f"127.0.0.1:{PORT + 1}" in message
    finally:
        node.stop_started_here()


def test_cli_debug_output_never_shows_the_password(app_options) -> None:
    cli = [
        sys.executable, "-m", "cassieq_spark", "--debug", "--contact-points", "127.0.0.1",
        "--port", str(PORT), "--keyspace", KEYSPACE, "--username", APP_ROLE,
        "--password", APP_PASSWORD, "--ssl", "true", "--ssl-ca-file", app_options["sslCaFile"],
    ]  # fmt: skip
    ok = subprocess.run([*cli, "list-queues"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "DEBUG" in ok.stderr, ok.stderr[-2000:]
    failed = subprocess.run(
        [*cli, "get", "no_such_queue"], capture_output=True, text=True, timeout=60
    )
    assert failed.returncode != 0 and "Traceback" in failed.stderr  # --debug shows it
    for out in (ok.stdout, ok.stderr, failed.stdout, failed.stderr):
        assert _leaks(out) == 0


def test_a_certificate_for_another_host_fails_only_with_sslverify(tmp_path) -> None:
    from cassieq_dev.local_cassandra.security import ensure_tls_files

    base = STATE_DIR / "secured-hostname-test"
    node = LocalCassandra(port=PORT + 2, storage_port=STORAGE_PORT + 2, base_dir=base, tls="on")
    if not node.is_node_running(1):
        import shutil

        shutil.rmtree(node.tls_dir, ignore_errors=True)
    # A node certificate signed by the trusted CA, but for a name this client does not use.
    ensure_tls_files(node.tls_dir, node_names=("DNS:elsewhere.invalid",))
    node.start()
    try:
        options = {**node.client_options(), "sslVerify": "true"}
        message = _fails(options, ConnectionFailedError)
        assert f"127.0.0.1:{PORT + 2}" in message and "does not name this host" in message
        with QueueClient.from_options({**options, "sslVerify": "false"}) as client:
            assert client.conn.session.execute("SELECT key FROM system.local").one()
    finally:
        node.stop_started_here()
