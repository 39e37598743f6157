"""docs/service.md's first queue over HTTP from a fresh clone: `make serve` in a clone of this
checkout's last commit (its own venv with the `[server]` extra only, the Cassandra jars, the
schema), then the page's commands as written. Prints the wall time the page states.

On the Cassandra under test (CASSANDRA_PORT), in a keyspace of its own (CASSIEQ_KEYSPACE, which
`cassieq serve` reads), on a free HTTP port. Long tier: it installs a venv (minutes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from support.docs_blocks import ROOT, blocks
from support.service_harness import free_port


def test_the_first_http_queue_from_a_fresh_clone(cassandra, tmp_path: Path) -> None:
    if cassandra.contact_points != ["127.0.0.1"]:
        raise AssertionError(f"make serve needs the Cassandra on 127.0.0.1: {cassandra}")
    commands = [b.code for b in blocks(ROOT / "docs" / "service.md") if b.lang == "bash"][1]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    keyspace = f"quick_{uuid.uuid4().hex[:10]}"
    http_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASSIEQ_")}
    env.update(CASSIEQ_KEYSPACE=keyspace)
    env.pop("VIRTUAL_ENV", None)
    log = tmp_path / "serve.log"
    started = time.monotonic()
    with log.open("wb") as out:
        serve = subprocess.Popen(
            ["make", "serve", f"CASSANDRA_PORT={cassandra.port}", f"HTTP_PORT={http_port}"],
            cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        while b"Uvicorn running" not in log.read_bytes():
            assert serve.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() - started < 900, "make serve not ready in 15 minutes"
            time.sleep(0.5)
        ready = time.monotonic() - started
        done = subprocess.run(
            ["bash", "-e", "-c", commands], cwd=clone, capture_output=True, text=True,
            env={**env, "CASSIEQ_SERVICE_URL": f"http://127.0.0.1:{http_port}"}, timeout=300,
        )  # fmt: skip
        total = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        assert "hello: put into jobs, received and acked" in done.stdout
        listed = subprocess.run(
            [str(clone / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format=json"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        installed = {p["name"].lower() for p in json.loads(listed)}
        assert "starlette" in installed and not installed & {"pyspark", "pytest", "matplotlib"}
        print(
            f"\nfresh clone to a first HTTP message: make serve ready in {ready:.1f} s, "
            f"the page's commands {total - ready:.1f} s, {total / 60:.1f} min in all"
        )
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(60)
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
