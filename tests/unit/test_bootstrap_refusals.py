"""``bootstrap`` refuses, before it connects or creates anything, what used to fail half-way
(keyspace and schema made, then a raw server error) or read as something else: a role name
with a non-ASCII letter, an app role on a connection without a username (a cluster without
password authentication), NetworkTopologyStrategy's ``replication_factor`` taken for a data
center of that name."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli_run import NOWHERE, run_main

from cassieq_spark import cli, validate
from cassieq_spark.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture
def pw(tmp_path: Path) -> str:
    path = tmp_path / "pw_nl"
    path.write_text("apppw\n")
    return str(path)


def test_a_role_name_with_a_non_ascii_letter_is_refused_before_connecting(
    pw: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """N167: --app-role rôle passed str.isalnum, then the server refused it after the schema
    step."""
    argv = [*NOWHERE, "--username", "admin", "--password", "x", "bootstrap", "--create-keyspace"]
    code, err = run_main(cli.main, [*argv, "--app-role", "rôle", "--app-password-file", pw], capsys)
    assert code == 2 and len(err) == 1, err
    assert "app role 'rôle' is not valid" in err[0] and "ASCII" in err[0], err


@pytest.mark.parametrize("name", ["rôle", "", "a" * 49, "a-b", "a b", "١"])
def test_role_names_are_ascii_letters_digits_and_underscore(name: str) -> None:
    with pytest.raises(ConfigError, match="is not valid"):
        validate.role_name(name)
    assert validate.role_name("app_role_1") == "app_role_1"


def test_an_app_role_without_a_username_is_refused_before_connecting(
    pw: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """N170: on a node without PasswordAuthenticator the role manager refuses PASSWORD (a raw
    InvalidRequest) after the keyspace and schema were made; a client reaching a node without a
    username is on such a node."""
    argv = [*NOWHERE, "bootstrap", "--create-keyspace", "--app-role", "badin2_app"]
    code, err = run_main(cli.main, [*argv, "--app-password-file", pw], capsys)
    assert code == 2 and len(err) == 1, err
    assert "password authentication" in err[0] and "--username" in err[0], err


def test_network_topology_replication_factor_is_refused_by_name() -> None:
    """N146: {"class": "NetworkTopologyStrategy", "replication_factor": 1} was read as a data
    center named 'replication_factor' (and refused for lack of nodes there)."""
    with pytest.raises(ConfigError) as info:
        validate.replication('{"class": "NetworkTopologyStrategy", "replication_factor": 1}')
    message = str(info.value)
    assert "'replication_factor'" in message and "name each data center" in message
    assert "\n" not in message


def test_a_directory_as_the_app_password_file_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """N162: --app-password-file adir (the other rows of that reader, N160, N161, N163, N164:
    tests/unit/test_bounded_inputs.py)."""
    argv = [*NOWHERE, "bootstrap", "--create-keyspace", "--app-role", "badin2_app"]
    code, err = run_main(cli.main, [*argv, "--app-password-file", str(tmp_path)], capsys)
    assert code == 2 and len(err) == 1, err
    assert "option '--app-password-file'" in err[0] and "not a regular file" in err[0], err
