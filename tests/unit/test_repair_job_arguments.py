"""The repair job's arguments that used to start Spark for a long trace, or to be taken
without a word: a local master with 0 threads, a spark:// master nobody answers at (71 s of
retries, 132 lines that never name it), yarn without its configuration, a pause between passes
of 1e308 s, --interval without --loop, a directory as the CA file. Each is one line, in
seconds, before Spark starts and before Cassandra is asked anything."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from types import ModuleType

import pytest
from support.cli_run import NOWHERE, run_main

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def repair() -> ModuleType:
    """The repair job's command line (jobs/repair.py is its spark-submit launcher)."""
    from cassieq_spark.spark import repair_command

    return repair_command


@pytest.fixture
def no_hadoop(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("CASSIEQ_"):
            monkeypatch.delenv(name)


def _free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "row, extra, status, fragment",
    [
        ("N243", ["--master", "local[0]"], 2, "local[N] (N >= 1)"),
        ("N243-failures", ["--master", "local[2,0]"], 2, "not a Spark master URL"),
        ("N245", ["--master", "yarn"], 2, "HADOOP_CONF_DIR or YARN_CONF_DIR"),
        ("N246", ["--loop", "--interval", "1e308"], 2, "from 0 to 86400"),
        ("N246-grouped", ["--loop", "--interval", "3_0"], 2, "ASCII digits"),
        ("N247", ["--interval", "5"], 2, "--interval goes with --loop"),
        ("N241", ["--contact-points", "127.0.0.1:²"], 2, "the port after ':' must be an integer"),
        (
            "N244",
            ["--master", "spark://127.0.0.1:{port}"],
            1,
            "cannot reach Spark master spark://127.0.0.1:",
        ),
    ],
)
def test_bad_job_arguments_are_one_line_before_spark_or_cassandra(
    repair: ModuleType,
    no_hadoop: None,
    capsys: pytest.CaptureFixture[str],
    row: str,
    extra: list[str],
    status: int,
    fragment: str,
) -> None:
    extra = [x.replace("{port}", str(_free_port())) for x in extra]
    started = time.monotonic()
    code, err = run_main(
        repair.main, [*NOWHERE, "--keyspace", "badin2", "--queue", "ba", *extra], capsys
    )
    assert time.monotonic() - started < 10
    assert code == status and fragment in err[-1], (code, err)
    assert len([line for line in err if "repair" in line and "error" in line]) == 1, err


def test_a_directory_as_the_ca_file_is_one_line(
    repair: ModuleType, no_hadoop: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """N240: --ssl true --ssl-ca-file adir ended in a raw IsADirectoryError."""
    argv = [*NOWHERE, "--queue", "ba", "--ssl", "true", "--ssl-ca-file", str(tmp_path)]
    code, err = run_main(repair.main, argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert "'sslCaFile'" in err[0] and "not a regular file" in err[0], err


def test_a_reachable_spark_master_and_good_values_pass_the_checks(
    repair: ModuleType, no_hadoop: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        repair.check_master(f"spark://127.0.0.1:{_free_port()},127.0.0.1:{port}")
    monkeypatch.setenv("YARN_CONF_DIR", "/etc/hadoop")
    repair.check_master("yarn")
    args = repair.build_parser().parse_args(["--queue", "q", "--master", "local[1,3]"])
    assert args.master == "local[1,3]" and args.interval is None
