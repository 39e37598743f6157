"""The driver arguments each way of connecting produces: contact points, a secure-connect bundle
(Astra: ``cloud={'secure_connect_bundle': path}``, nothing that would clash with it), an auth
provider given as an object or as a dotted path; and ``bootstrap --no-create``'s refusals, all
before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest
from cassandra.auth import PlainTextAuthProvider
from support.cli_run import NOWHERE, run_main

from cassieq_spark import cli
from cassieq_spark.config import ConnectionConfig, connection_from_options, load_auth_provider
from cassieq_spark.errors import ConfigError

pytestmark = pytest.mark.unit


def make_provider() -> PlainTextAuthProvider:
    """An auth provider factory for the dotted-path tests (``module:callable``)."""
    return PlainTextAuthProvider(username="svc", password="from-factory")


def not_a_provider() -> object:
    return object()


def test_contact_points_give_hosts_port_and_tls() -> None:
    kw = ConnectionConfig(contact_points=("10.0.0.1", "10.0.0.2"), port=9043).cluster_arguments()
    assert kw == {
        "auth_provider": None,
        "contact_points": ["10.0.0.1", "10.0.0.2"],
        "port": 9043,
        "ssl_context": None,
    }


def test_a_bundle_gives_the_cloud_argument_and_no_endpoint(tmp_path: Path) -> None:
    bundle = tmp_path / "secure-connect-db.zip"
    bundle.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    config = connection_from_options(
        {
            "secureConnectBundle": str(bundle),
            "username": "client-id",
            "password": "secret",
            "keyspace": "queues",
        },
        known_only=True,
    )
    kw = config.cluster_arguments()
    assert set(kw) == {"cloud", "auth_provider"}
    assert kw["cloud"] == {"secure_connect_bundle": str(bundle)}
    auth = kw["auth_provider"]
    assert isinstance(auth, PlainTextAuthProvider)
    assert (auth.username, auth.password) == ("client-id", "secret")
    assert "secure-connect-db.zip" in config.describe() and "secret" not in config.describe()


@pytest.mark.parametrize(
    "extra, named",
    [
        ({"contactPoints": "10.0.0.1"}, "contactPoints"),
        ({"port": "9043"}, "port"),
        ({"ssl": "true"}, "ssl"),
        ({"localDc": "dc1"}, "localDc"),
    ],
)
def test_a_bundle_refuses_the_options_it_replaces(extra: dict, named: str) -> None:
    with pytest.raises(ConfigError) as err:
        connection_from_options({"secureConnectBundle": "/b.zip", **extra})
    assert repr(named) in str(err.value) and "secureConnectBundle" in str(err.value)


def test_a_bundle_that_is_not_a_readable_file_is_named_when_connecting(tmp_path: Path) -> None:
    config = ConnectionConfig(secure_connect_bundle=str(tmp_path / "missing.zip"))
    with pytest.raises(ConfigError) as err:
        config.cluster_arguments()
    assert "missing.zip" in str(err.value) and "secureConnectBundle" in str(err.value)


def test_an_auth_provider_object_is_passed_to_the_driver() -> None:
    provider = PlainTextAuthProvider(username="u", password="p")
    kw = ConnectionConfig(auth_provider=provider).cluster_arguments()
    assert kw["auth_provider"] is provider


def test_an_auth_provider_and_a_username_exclude_each_other() -> None:
    provider = PlainTextAuthProvider(username="u", password="p")
    with pytest.raises(ConfigError, match="not both"):
        ConnectionConfig(auth_provider=provider, username="u", password="p")
    with pytest.raises(ConfigError, match="AuthProvider"):
        ConnectionConfig(auth_provider="pkg.mod:factory")  # type: ignore[arg-type]


@pytest.mark.parametrize("sep", [":", "."])
def test_an_auth_provider_option_is_a_dotted_path_called_where_the_connection_is_made(
    sep: str,
) -> None:
    path = f"{__name__}{sep}make_provider"
    config = connection_from_options({"authProvider": path}, known_only=True)
    auth = config.cluster_arguments()["auth_provider"]
    assert isinstance(auth, PlainTextAuthProvider) and auth.password == "from-factory"


@pytest.mark.parametrize(
    "path, says",
    [
        ("no_such_module_here:factory", "cannot import"),
        (f"{__name__}:missing", "cannot import"),
        (f"{__name__}:not_a_provider", "not a cassandra.auth.AuthProvider"),
        ("factory", "names no callable"),
    ],
)
def test_a_bad_auth_provider_path_is_one_clear_error(path: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_auth_provider(path)
    assert says in str(err.value) and path in str(err.value)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--create-keyspace"], "--create-keyspace"),
        (["--replication-factor", "3"], "--replication-factor"),
        (["--app-role", "app", "--app-password-file", "/nonexistent"], "--app-role"),
    ],
)
def test_bootstrap_no_create_refuses_what_would_create_more_than_tables(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(cli.main, [*NOWHERE, "bootstrap", "--no-create", *flags], capsys)
    assert code == 2 and len(err) == 1 and named in err[0] and "--no-create" in err[0], err


def test_the_same_auth_provider_path_gives_one_shared_connection_key() -> None:
    """Spark parses the options of every plan and task: a new provider each time would make a
    new connection each time (the per-process cache is keyed by the settings)."""
    a = connection_from_options({"authProvider": f"{__name__}:make_provider"})
    b = connection_from_options({"authProvider": f"{__name__}:make_provider"})
    assert a.cache_key() == b.cache_key()


def test_a_config_pickled_for_an_executor_loads_its_auth_provider_again_by_path() -> None:
    """Spark ships the sink's and source's settings to executors by pickling them; a provider
    need not pickle (Kerberos, cloud plug-ins), its dotted path does."""
    import pickle

    config = connection_from_options({"authProvider": f"{__name__}:make_provider"})
    state = config.__getstate__()
    assert state["auth_provider"] is None and state["auth_provider_path"].endswith("make_provider")
    copy = pickle.loads(pickle.dumps(config))
    assert copy.auth_provider is config.auth_provider  # loaded again: once per process
    assert copy.cache_key() == config.cache_key()
