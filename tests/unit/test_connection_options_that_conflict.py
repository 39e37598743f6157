"""Connection settings that used to be taken without a word, or to end in a raw error, are a
one-line error naming the flag, option or variable, before any connection: both password
flags (the later one won), TLS files or sslVerify without ssl (a plaintext connection), a
client key without its certificate, an empty CASSIEQ_* variable (taken for unset: the default
keyspace, someone else's), a directory as a PEM file (IsADirectoryError)."""

from __future__ import annotations

import argparse
import os
import ssl
from pathlib import Path

import pytest
from support.cli_run import NOWHERE, run_main

from cassieq_spark import cli
from cassieq_spark.config import (
    ConnectionConfig,
    connection_from_options,
    env_defaults,
    options_from_flags,
)
from cassieq_spark.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture
def pw(tmp_path: Path) -> str:
    path = tmp_path / "pw_nl"
    path.write_text("secret\n")
    return str(path)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("CASSIEQ_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_both_password_flags_are_refused(
    pw: str, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """N176: --password x --password-file F."""
    argv = [*NOWHERE, "--username", "u", "--password", "x", "--password-file", pw, "list-queues"]
    code, err = run_main(cli.main, argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert "--password and --password-file exclude each other" in err[0], err


def test_a_password_flag_still_beats_a_password_variable(
    pw: str, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("CASSIEQ_PASSWORD", "other")
    opts = options_from_flags(argparse.Namespace(password_file=pw, username="u"))
    assert opts["passwordFile"] == pw and "password" not in opts


@pytest.mark.parametrize(
    "row, argv, env, named",
    [
        ("N190", ["--ssl-ca-file", "nosuch.pem"], {}, "sslCaFile"),
        ("N191", ["--ssl-verify", "false"], {}, "sslVerify"),
        ("N224", [], {"CASSIEQ_SSL_CA_FILE": "nosuch.pem"}, "sslCaFile"),
        (
            "N224-cert",
            [],
            {"CASSIEQ_SSL_CERT_FILE": "c.pem", "CASSIEQ_SSL_KEY_FILE": "k.pem"},
            "sslCertFile",
        ),
        ("N224-off", ["--ssl", "false", "--ssl-ca-file", "ca.pem"], {}, "sslCaFile"),
    ],
)
def test_tls_options_without_ssl_are_refused(
    row: str,
    argv: list[str],
    env: dict[str, str],
    named: str,
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    code, err = run_main(cli.main, [*NOWHERE, *argv, "list-queues"], capsys)
    assert code == 2 and len(err) == 1, err
    assert f"option {named!r}" in err[0] and "ssl=true" in err[0], err


def test_a_client_key_without_its_certificate_is_refused(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """N189: --ssl true --ssl-ca-file ca.pem --ssl-key-file client.key, no --ssl-cert-file."""
    key = tmp_path / "client.key"
    key.write_text("x")
    argv = [*NOWHERE, "--ssl", "true", "--ssl-key-file", str(key), "list-queues"]
    code, err = run_main(cli.main, argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert "'sslKeyFile'" in err[0] and "'sslCertFile'" in err[0], err


def test_tls_with_ssl_on_and_a_python_context_are_taken() -> None:
    c = connection_from_options({"ssl": "true", "sslVerify": "false"})
    assert c.ssl_enabled and not c.ssl_verify
    ConnectionConfig(ssl_enabled=True, ssl_context_override=ssl.create_default_context())


@pytest.mark.parametrize("row", ["N183", "N183-cert"])
def test_a_directory_as_a_pem_file_is_refused_in_one_line(tmp_path: Path, row: str) -> None:
    """N183 (and N240, the repair job's same flags: tests/unit/test_repair_job_arguments.py)."""
    adir = tmp_path / "adir"
    adir.mkdir()
    files = {"ssl_ca_file": str(adir)} if row == "N183" else {"ssl_cert_file": str(adir)}
    config = ConnectionConfig(ssl_enabled=True, **files)
    with pytest.raises(ConfigError, match="is not a regular file; give a readable PEM file"):
        config.ssl_context()


def test_a_directory_as_the_ca_file_on_the_command_line(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """N183: cassieq --ssl true --ssl-ca-file adir list-queues."""
    argv = [*NOWHERE, "--ssl", "true", "--ssl-ca-file", str(tmp_path), "list-queues"]
    code, err = run_main(cli.main, argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert "'sslCaFile'" in err[0] and "not a regular file" in err[0], err


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_variable_is_refused_not_taken_for_unset(
    value: str, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """N201: CASSIEQ_KEYSPACE='' ran the command against the default keyspace 'cassieq'."""
    clean_env.setenv("CASSIEQ_KEYSPACE", value)
    code, err = run_main(cli.main, [*NOWHERE, "stats", "ba"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "CASSIEQ_KEYSPACE is set but empty" in err[0], err


def test_an_empty_variable_that_a_flag_overrides_is_fine() -> None:
    env = {"CASSIEQ_KEYSPACE": "", "CASSIEQ_PORT": "9999"}
    assert env_defaults(env, overridden={"keyspace"}) == {"port": "9999"}
    with pytest.raises(ConfigError, match="CASSIEQ_KEYSPACE is set but empty"):
        env_defaults(env)
