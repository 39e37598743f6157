"""The connection URL, ``cassieq://user@host:port/keyspace``: what each form stands for, and a
one-line refusal naming the value and the allowed form for each bad one."""

from __future__ import annotations

import argparse

import pytest

from cassieq_spark.config import (
    URL_FORM,
    add_connection_flags,
    connection_from_options,
    env_defaults,
    options_from_flags,
    parse_url,
)
from cassieq_spark.errors import ConfigError


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("cassieq://db1", {"contactPoints": "db1"}),
        ("cassieq://db1/", {"contactPoints": "db1"}),
        ("cassieq://db1:9043", {"contactPoints": "db1", "port": "9043"}),
        (
            "cassieq://app@10.0.0.5:9042/queues",
            {"username": "app", "contactPoints": "10.0.0.5", "port": "9042", "keyspace": "queues"},
        ),
        (
            "CASSIEQ://a,b,c:9142/ks_1",
            {"contactPoints": "a,b,c", "port": "9142", "keyspace": "ks_1"},
        ),
        (
            "cassieq://me@x.example.org/k",
            {"username": "me", "contactPoints": "x.example.org", "keyspace": "k"},
        ),
    ],
)
def test_a_url_stands_for_its_connection_options(url, options):
    assert parse_url(url) == options


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("127.0.0.1:9042", "must start with cassieq://"),
        ("cql://h/ks", "must start with cassieq://"),
        ("cassieq://", "names no host"),
        ("cassieq:///ks", "names no host"),
        ("cassieq://u:secret@h/ks", "holds a password"),
        ("cassieq://@h/ks", "user before '@' is empty"),
        ("cassieq://h:port/ks", "port 'port' is not a number"),
        ("cassieq://h:70000/ks", "must be from 1 to 65535"),
        ("cassieq://h:1,g/ks", "only the last host may carry the port"),
        ("cassieq://h,,g/ks", "a host between commas is empty"),
        ("cassieq://h/ks/more", "the path is one keyspace name"),
        ("cassieq://h/1ks", "keyspace"),
        ("cassieq://h/ks?ssl=true", "query"),
        ("cassieq://h /ks", "spaces"),
    ],
)
def test_a_bad_url_is_refused_naming_the_value_and_the_form(url, why):
    with pytest.raises(ConfigError, match=why.replace("(", r"\(").replace("?", r"\?")) as info:
        connection_from_options({"url": url})
    message = str(info.value)
    assert "\n" not in message
    if "must be from" not in why and why != "keyspace":
        assert repr(url) in message and URL_FORM in message


def test_options_given_beside_the_url_win_over_its_parts():
    config = connection_from_options(
        {"URL": "cassieq://app@h1,h2:9043/ks", "keyspace": "other", "password": "pw"}
    )
    assert config.contact_points == ("h1", "h2") and config.port == 9043
    assert (config.keyspace, config.username, config.password) == ("other", "app", "pw")


def test_the_environment_variable_and_the_flag(monkeypatch):
    env = {"CASSIEQ_URL": "cassieq://h:9050/from_env"}
    assert env_defaults(env) == {"url": "cassieq://h:9050/from_env"}
    parser = argparse.ArgumentParser()
    add_connection_flags(parser)
    monkeypatch.setenv("CASSIEQ_KEYSPACE", "env_keyspace")
    monkeypatch.setenv("CASSIEQ_CONTACT_POINTS", "env_host")
    # the flag's parts beat the variables, as every flag does
    options = options_from_flags(parser.parse_args(["--url", "cassieq://flag_host/flag_ks"]))
    config = connection_from_options(options)
    assert config.contact_points == ("flag_host",) and config.keyspace == "flag_ks"
    # a part the URL leaves out still comes from the variables
    monkeypatch.setenv("CASSIEQ_PORT", "9044")
    options = options_from_flags(parser.parse_args(["--url", "cassieq://flag_host/flag_ks"]))
    assert connection_from_options(options).port == 9044
    with pytest.raises(ConfigError, match="--url 'nope'"):
        options_from_flags(parser.parse_args(["--url", "nope"]))
