"""The repair job's Spark Connect arguments (``--remote sc://...``, ``--master sc://...``) and
:func:`run_repair`'s checks: each bad value is one line, in seconds, before Spark starts and
before Cassandra is asked anything."""

from __future__ import annotations

import os
import socket
import time
from types import ModuleType

import pytest
from support.cli_run import NOWHERE, run_main

from cassieq_spark.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def repair() -> ModuleType:
    from cassieq_spark.spark import repair_command

    return repair_command


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("CASSIEQ_"):
            monkeypatch.delenv(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "extra, status, fragment",
    [
        (["--remote", "sc://127.0.0.1:{port}"], 1, "cannot reach the Spark Connect server"),
        (["--master", "sc://127.0.0.1:{port}"], 1, "cannot reach the Spark Connect server"),
        (["--remote", "spark://127.0.0.1:7077"], 2, "not a Spark Connect URL"),
        (["--remote", "sc://127.0.0.1:1", "--master", "local[2]"], 2, "not allowed with"),
        (["--remote", "sc://127.0.0.1:99999"], 2, "is not HOST:PORT"),
    ],
)
def test_bad_connect_arguments_are_one_line_before_spark_or_cassandra(
    repair: ModuleType,
    no_env: None,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    status: int,
    fragment: str,
) -> None:
    extra = [x.replace("{port}", str(_free_port())) for x in extra]
    started = time.monotonic()
    code, err = run_main(repair.main, [*NOWHERE, "--queue", "ba", *extra], capsys)
    assert time.monotonic() - started < 10
    assert code == status and fragment in err[-1], (code, err)


@pytest.mark.parametrize(
    "url, address",
    [
        ("sc://127.0.0.1:15002", ("127.0.0.1", 15002)),
        ("sc://spark.example", ("spark.example", 15002)),
        ("sc://h:443/;use_ssl=true;token=x", ("h", 443)),
        ("sc://[::1]:15102", ("::1", 15102)),
    ],
)
def test_connect_urls_name_their_server(
    repair: ModuleType, url: str, address: tuple[str, int]
) -> None:
    assert repair.connect_address(url) == address


def test_a_reachable_connect_server_passes_the_check(repair: ModuleType) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"sc://127.0.0.1:{listener.getsockname()[1]}"
        repair.check_master(url)
        args = repair.build_parser().parse_args(["--queue", "q", "--remote", url])
    assert args.master == url


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"queue_names": "bad name!"}, "invalid queue name"),
        ({"repair_timeout": 0}, "repair_timeout"),
        ({"max_buckets": 0}, "max_buckets must be a positive integer"),
        ({"connection": {"contactPoints": "127.0.0.1", "queue": "q"}}, "unknown option 'queue'"),
    ],
)
def test_run_repair_refuses_bad_values_before_any_spark_job(kwargs: dict, fragment: str) -> None:
    """No session is needed to refuse them: ``spark=None`` would fail on the first job."""
    from cassieq_spark.spark.repair_job import run_repair

    connection = kwargs.pop("connection", {"contactPoints": "127.0.0.1", "port": "1"})
    with pytest.raises(ConfigError, match=fragment):
        run_repair(None, connection, **kwargs)
