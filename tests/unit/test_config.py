from __future__ import annotations

import pytest

from cassieq_spark.config import (
    ConnectionConfig,
    connection_from_options,
    env_defaults,
    validate_queue_name,
)
from cassieq_spark.errors import ConfigError


def test_options_are_case_insensitive_and_parsed():
    c = connection_from_options(
        {
            "CONTACTPOINTS": "a, b:9043",
            "keySpace": "ks1",
            "localdc": "dc1",
            "SSL": "true",
            "sslVerify": "false",
        }
    )
    assert c.contact_points == ("a", "b") and c.port == 9043
    assert (c.keyspace, c.local_dc, c.ssl_verify) == ("ks1", "dc1", False)


@pytest.mark.parametrize(
    "opts,match",
    [
        ({"port": "x"}, "'port' must be an integer"),
        ({"port": "70000"}, "port must be from 1 to 65535"),
        ({"keyspace": "1bad"}, "keyspace '1bad' is not valid"),
        ({"contactPoints": " , "}, "contactPoints"),
        ({"consistency": "MOST"}, "consistency must be one of"),
        ({"ssl": "maybe"}, "'ssl' must be true or false"),
        ({"username": "u"}, "username and password go together"),
        ({"requestTimeout": "inf"}, "requestTimeout"),
    ],
)
def test_bad_options_name_the_option(opts, match):
    with pytest.raises(ConfigError, match=match):
        connection_from_options(opts)


def test_password_never_in_repr_or_describe():
    c = ConnectionConfig(username="u", password="hunter2")
    assert "hunter2" not in repr(c) and "hunter2" not in c.describe()


def test_env_defaults():
    env = {"CASSIEQ_CONTACT_POINTS": "h1", "CASSIEQ_PORT": "9999", "X": "1"}
    assert env_defaults(env) == {"contactPoints": "h1", "port": "9999"}


def test_queue_names():
    assert validate_queue_name("a.b-c_1") == "a.b-c_1"
    for bad in ("", "_x", "a b", "a" * 201, None):
        with pytest.raises(ConfigError, match="invalid queue name"):
            validate_queue_name(bad)
