"""The connection flags and exit statuses of every command line of the project (``cassieq``,
``cassieq-repair``).

Flags become Spark-style option names, so they go through the same parsing and checks as the
sink's and source's options; ``CASSIEQ_*`` variables fill in what is not given. A failure maps to
the same exit status whichever command meets it (:func:`exit_status`).
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError, QueueNotFoundError, StaleReceiptError
from .options import env_defaults, parse_url

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2  # argparse's own status for bad arguments
EXIT_EMPTY = 3  # `get` found no visible message
EXIT_NOT_FOUND = 4  # the queue does not exist
EXIT_STALE = 5  # `ack`/`change-visibility` with a receipt that no longer owns its message
EXIT_INTERRUPTED = 130  # Ctrl-C outside a watch: the shell's convention for SIGINT


def exit_status(exc: BaseException) -> int:
    """The exit status of a command that failed with ``exc``: an unknown queue 4, a bad value 2
    (a receipt that is not one included: not "stale"), a stale receipt 5, anything else 1."""
    if isinstance(exc, QueueNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, StaleReceiptError):
        return EXIT_STALE
    return EXIT_ERROR


_FLAGS = (
    ("url", "url"),
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
    ("secure_connect_bundle", "secureConnectBundle"),
    ("auth_provider", "authProvider"),
)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The connection flags every command line of the project takes (CASSIEQ_* fall-backs)."""
    g = parser.add_argument_group("connection")
    g.add_argument(
        "--url",
        metavar="URL",
        help="cassieq://[user@]host[,host...][:port]/keyspace: the connection in one value "
        "(CASSIEQ_URL); the flags below win over its parts",
    )
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
    g.add_argument(
        "--secure-connect-bundle",
        metavar="ZIP",
        help="a managed service's secure-connect bundle (Astra) instead of hosts, port and TLS",
    )
    g.add_argument(
        "--auth-provider",
        metavar="PKG.MOD:CALLABLE",
        help="a callable that returns a cassandra.auth.AuthProvider (instead of a password)",
    )


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
    if "url" in given:  # so do the parts of --url: CASSIEQ_KEYSPACE must not replace its keyspace
        overridden |= set(parse_url(given["url"], "--url"))
    return {**env_defaults(overridden=overridden), **given}
