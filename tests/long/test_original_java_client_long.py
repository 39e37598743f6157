"""The original CassieQ Java client (the ``client`` module of the original's source, unchanged)
runs create queue, put, get, update, get, ack against ``cassieq serve``, signing each request
with its own ``Authorization: Signed`` scheme.

Needs a built checkout of the original (``CASSIEQ_ORIGINAL_SRC``: ``client/target`` holds the
client jar, ``core/target`` the shaded server jar, whose bundled libraries are the client's
dependencies in the versions the original's build resolved: its model classes, Retrofit, OkHttp,
Jackson, Joda-Time) and a JDK; skipped with the reason otherwise. A small program
(``original_client/ClientRoundTrip.java``) is compiled at test time against those jars; it
prints each step's status and fields and the test checks them, so a wrong answer fails here
with the exchange in the message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from support.service_harness import start_test_server

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "original_client" / "ClientRoundTrip.java"


def _jar(folder: Path, pattern: str) -> Path:
    found = sorted(
        p
        for p in folder.glob(pattern)
        if not p.name.endswith(("-sources.jar", "-javadoc.jar", "-tests.jar"))
        and not p.name.startswith("original-")
    )
    if not found:
        pytest.skip(f"no {pattern} in {folder}: build the original checkout first")
    return found[-1]


@pytest.fixture(scope="module")
def original_client_classpath(tmp_path_factory) -> str:
    src = os.environ.get("CASSIEQ_ORIGINAL_SRC", "")
    if not src:
        pytest.skip("no original CassieQ checkout given (CASSIEQ_ORIGINAL_SRC)")
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (java and javac) on PATH")
    root = Path(src).expanduser()
    jars = [
        _jar(root / "client" / "target", "cassieq-client-*.jar"),
        _jar(root / "core" / "target", "cassieq-core-*.jar"),
    ]
    classes = tmp_path_factory.mktemp("java-client")
    cp = os.pathsep.join(str(j) for j in jars)
    subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", cp, str(PROGRAM)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return os.pathsep.join([str(classes), cp])


def _steps(stdout: str) -> dict[str, tuple[int, dict[str, str]]]:
    out = {}
    for line in stdout.splitlines():
        if not line.startswith("STEP\t"):
            continue  # the client's own logging
        _, step, status, *fields = line.split("\t")
        out[step] = (int(status), dict(f.split("=", 1) for f in fields))
    return out


def test_the_original_java_client_runs_put_get_update_ack_against_the_service(
    original_client_classpath, cassandra, queue_client, cassieq_options, tmp_path
):
    server = start_test_server(tmp_path / "serve", cassandra, cassieq_options)
    try:
        account = f"java-{uuid.uuid4().hex[:8]}"
        created = server.admin("POST", "/accounts", account)
        assert created.status == 201, created
        key = created.json()["keys"]["primary"]
        queue = f"jq{uuid.uuid4().hex[:8]}"
        run = subprocess.run(
            [
                "java", "-cp", original_client_classpath, "ClientRoundTrip",
                f"http://127.0.0.1:{server.port}/", account, key, queue,
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        exchange = f"stdout:\n{run.stdout[-6000:]}\nstderr:\n{run.stderr[-3000:]}"
        assert run.returncode == 0, exchange
        steps = _steps(run.stdout)
        status = {name: s for name, (s, _) in steps.items()}
        assert status == {
            "create": 201,
            "put": 201,
            "get": 200,
            "update": 200,
            "get-again": 200,
            "ack": 204,
            "get-empty": 204,
            "ack-stale": 409,
            "delete": 200,
        }, exchange
        got, updated, again = steps["get"][1], steps["update"][1], steps["get-again"][1]
        # the client sends the message Jackson-serialized; the server keeps the bytes as sent
        assert got["message"] == '"hello from java"', exchange
        assert got["deliveryCount"] == "0" and got["receipt"] not in ("", "<null>"), exchange
        assert updated["receipt"] not in (got["receipt"], "<null>"), exchange
        assert updated["tag"] == got["tag"] != "<null>", exchange
        assert again["message"] == "updated by java", exchange
        assert again["deliveryCount"] == "1" and again["tag"] == got["tag"], exchange
        assert steps["get-empty"][1] == {}, exchange
    finally:
        server.stop()
