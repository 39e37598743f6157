"""The connection flags of every command line of the project (``cassieq``, ``jobs/repair.py``).

Flags become Spark-style option names, so they go through the same parsing and checks as the
sink's and source's options; ``CASSIEQ_*`` variables fill in what is not given.
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .options import env_defaults

_FLAGS = (
    ("contact_points", "contactPoints"),
    ("port", "port"),
    ("keyspace", "keyspace"),
    ("local_dc", "localDc"),
    ("username", "username"),
    ("password", "password"),
    ("password_file", "passwordFile"),
    ("ssl", "ssl"),
    ("ssl_ca_file", "sslCaFile"),
    ("ssl_cert_file", "sslCertFile"),
    ("ssl_key_file", "sslKeyFile"),
    ("ssl_verify", "sslVerify"),
)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The connection flags every command line of the project takes (CASSIEQ_* fall-backs)."""
    g = parser.add_argument_group("connection")
    g.add_argument("--contact-points", help="comma-separated hosts (default 127.0.0.1)")
    g.add_argument("--port", help="CQL port (default 9042)")
    g.add_argument("--keyspace", help="keyspace of the queues (default cassieq)")
    g.add_argument("--local-dc", help="the local data center of this client")
    g.add_argument("--username")
    g.add_argument("--password", help="better --password-file or CASSIEQ_PASSWORD (ps shows flags)")
    g.add_argument(
        "--password-file", metavar="FILE", help="a file whose first line is the password"
    )
    g.add_argument("--ssl", choices=("true", "false"), help="TLS to Cassandra (default false)")
    g.add_argument("--ssl-ca-file", metavar="PEM", help="CA certificates to trust")
    g.add_argument("--ssl-cert-file", metavar="PEM", help="client certificate (mutual TLS)")
    g.add_argument("--ssl-key-file", metavar="PEM", help="client key (mutual TLS)")
    g.add_argument("--ssl-verify", choices=("true", "false"), help="check the node's certificate")


def options_from_flags(args: argparse.Namespace) -> dict[str, str]:
    """Spark-style connection options: the flags given, else ``CASSIEQ_*`` variables."""
    if getattr(args, "password", None) is not None and getattr(args, "password_file", None):
        raise ConfigError(
            "--password and --password-file exclude each other: give one (--password-file keeps "
            "the password out of the process list)"
        )
    given = {
        name: getattr(args, flag) for flag, name in _FLAGS if getattr(args, flag, None) is not None
    }
    overridden = set(given)
    if overridden & {"password", "passwordFile"}:  # a flag beats either variable
        overridden |= {"password", "passwordFile"}
    return {**env_defaults(overridden=overridden), **given}
