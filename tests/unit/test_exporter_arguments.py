"""``cassieq exporter``'s own values are checked before it connects: a typo costs no
connection, and the error names the flag and its range."""

from __future__ import annotations

import pytest
from support.cli_run import NOWHERE, run_main

from cassieq_spark import cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--listen-port", "70000"], "--listen-port"),
        (["--refresh-seconds", "0.1"], "--refresh-seconds"),
        (["--refresh-seconds", "nan"], "--refresh-seconds"),
        (["--max-queues", "0"], "--max-queues"),
    ],
)
def test_bad_exporter_values_are_refused_before_connecting(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(cli.main, [*NOWHERE, "exporter", *flags], capsys)
    assert code == 2 and len(err) == 1 and named in err[0], err
