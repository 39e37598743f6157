"""Shell completion of ``cassieq`` through argcomplete when it is installed (the ``[cli]``
extra), the command unchanged without it; and the Spark option ``url``."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cassieq_spark import cli

CONSOLE = Path(sys.executable).parent / "cassieq"


def _complete(line: str, tmp_path: Path) -> str:
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    run = subprocess.run([str(CONSOLE)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return out.read_text()


def test_commands_and_flags_complete(tmp_path):
    pytest.importorskip("argcomplete")
    # argcomplete separates candidates with a vertical tab (its default IFS)
    assert _complete("cassieq upd", tmp_path).split("\x0b") == ["update-queue "]
    assert sorted(c.strip() for c in _complete("cassieq put q --de", tmp_path).split("\x0b")) == [
        "--dedup-id",
        "--delay",
    ]


def test_without_argcomplete_the_command_runs_as_ever(monkeypatch, capsys):
    real = builtins.__import__

    def no_argcomplete(name, *args, **kwargs):
        if name == "argcomplete":
            raise ImportError("no argcomplete here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_argcomplete)
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and "cassieq" in capsys.readouterr().out


def test_the_spark_option_url_gives_the_connection():
    options = pytest.importorskip("cassieq_spark.spark.options")
    parsed = options.sink_options(
        {"URL": "cassieq://app@h1,h2:9043/ks", "queue": "q", "password": "p"}
    )
    config = parsed.common.connection
    assert (config.contact_points, config.port, config.keyspace, config.username) == (
        ("h1", "h2"),
        9043,
        "ks",
        "app",
    )
