"""docs/service.md's first queue over HTTP, run as the page writes it against a running service.

The page's first block is `make serve`; here a `cassieq serve` of the harness stands in for it,
and the directory the next block runs in is laid out as `make serve` leaves a checkout
(`.venv/bin/cassieq`, `.serve/admin-key`), with CASSIEQ_SERVICE_URL naming the test's port. The
second block then runs as written with bash: `cassieq account create` over the admin API, then
the printed script's curls over real HTTP. The script it printed is the page's example but for
its keys; `cassieq account list` and `delete` (in this process) complete the command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from support.docs_blocks import ROOT, blocks, shell_commands
from support.service_harness import start_test_server

from cassieq_spark.cli import main

PAGE = ROOT / "docs" / "service.md"


def _first_sequence() -> list[str]:
    """The page's first three bash blocks: make serve, the two commands, the printed script."""
    return [b.code for b in blocks(PAGE) if b.lang == "bash"][:3]


def _without_keys(script: str, service: str) -> str:
    script = script.replace(service, "http://127.0.0.1:8080")
    script = re.sub(r"(?m)^# primary key: .*$", "# primary key: K1", script)
    script = re.sub(r"(?m)^# secondary key: .*$", "# secondary key: K2", script)
    return re.sub(r"(?m)^KEY=.*$", "KEY=K1", script).strip()


def test_the_pages_first_http_queue_runs_as_written(
    cassandra, own_keyspace_client, cassieq_options, tmp_path: Path, capsys
) -> None:
    serve, commands, example = _first_sequence()
    assert shell_commands(serve) == [["make", "serve"]]
    keyspace = own_keyspace_client.config.keyspace
    server = start_test_server(
        tmp_path / "server", cassandra, {**cassieq_options, "keyspace": keyspace}
    )
    try:
        checkout = tmp_path / "checkout"
        (checkout / ".venv" / "bin").mkdir(parents=True)
        (checkout / ".venv" / "bin" / "cassieq").symlink_to(Path(sys.executable).parent / "cassieq")
        (checkout / ".serve").mkdir(mode=0o700)
        (checkout / ".serve" / "admin-key").write_text(server.admin_key + "\n")
        service = f"http://127.0.0.1:{server.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CASSIEQ_")}
        env["CASSIEQ_SERVICE_URL"] = service
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-e", "-c", commands], cwd=checkout, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        took = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr + server.log()[-3000:]
        print(f"\nthe page's two commands against the running service: {took:.1f} s")
        assert done.stdout.strip().endswith("hello: put into jobs, received and acked"), done.stdout
        printed = (checkout / ".serve" / "acme.sh").read_text()
        assert _without_keys(printed, service) == _without_keys(example, "http://127.0.0.1:8080")
        primary = re.search(r"(?m)^KEY=(\S+)$", printed)
        assert primary and primary.group(1) != "PRIMARY-KEY-SHOWN-ONCE"

        # Every step went through: the queue is account acme's, its message acked.
        stats = own_keyspace_client.stats("acme.jobs")
        assert (stats["backlog"], stats["in_flight"]) == (0, 0), stats
        assert server.log().count("DELETE /api/v1/accounts/acme/queues/jobs/messages 204") == 1

        # The other two actions, in this process (the same command line, without a start).
        flags = ["--service", service, "--admin-key-file", str(checkout / ".serve" / "admin-key")]

        def cassieq(*args: str) -> tuple[int, str, str]:
            capsys.readouterr()  # what the test printed so far
            status = main(["account", *args, *flags])
            out, err = capsys.readouterr()
            return status, out, err

        status, out, _ = cassieq("list")
        assert status == 0 and json.loads(out) == [
            {"accountName": "acme", "keyNames": ["primary", "secondary"]}
        ]
        assert primary.group(1) not in out
        status, _, err = cassieq("delete", "acme")
        assert status == 2 and "add --yes" in err, err
        assert cassieq("delete", "acme", "--yes")[0] == 0
        status, _, err = cassieq("delete", "acme", "--yes")
        assert status == 1 and "no account 'acme'" in err and err.count("\n") == 1, err
    finally:
        server.stop()
