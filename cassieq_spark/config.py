"""Connection settings and option parsing, shared by the client, the CLI, the sink and the source.

Spark hands options over as a case-insensitive dict of strings; the CLI as flags; Python users
as keyword arguments. All of them end up in one :class:`ConnectionConfig`, validated here.
"""

from __future__ import annotations

import argparse
import os
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from cassandra import ConsistencyLevel

from . import validate
from .errors import ConfigError

# Limits and checks live in validate.py; re-exported here for the modules that import them
# from config.
from .validate import (  # noqa: E402, F401
    KEYSPACE_RE,
    MAX_DELAY_SECONDS,
    MAX_MESSAGE_TTL_SECONDS,
    MAX_REPAIR_TIMEOUT_SECONDS,
    MAX_VISIBILITY_SECONDS,
    QUEUE_NAME_RE,
    delay_seconds,
    repair_timeout_seconds,
    seconds,
    visibility_seconds,
)
from .validate import queue_name as validate_queue_name  # noqa: E402, F401

# Every "a closed block's rows are visible to the next reader" and "a plain row below the reader
# was consumed" argument needs reads and writes that overlap (R + W > RF): a quorum at least.
CONSISTENCY_LEVELS = ("LOCAL_QUORUM", "QUORUM", "EACH_QUORUM", "ALL")
BELOW_QUORUM = ("ANY", "ONE", "TWO", "THREE", "LOCAL_ONE")
SERIAL_LEVELS = ("SERIAL", "LOCAL_SERIAL")


@dataclass(frozen=True)
class ConnectionConfig:
    contact_points: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "cassieq"
    local_dc: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_enabled: bool = False
    ssl_ca_file: str | None = None
    ssl_cert_file: str | None = None
    ssl_key_file: str | None = None
    ssl_verify: bool = True
    # A ready-made context (Python API only) wins over the certificate file options.
    ssl_context_override: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    consistency: str = "LOCAL_QUORUM"
    serial_consistency: str = "LOCAL_SERIAL"
    connect_timeout: float = 10.0
    request_timeout: float = 20.0

    def __post_init__(self) -> None:
        if isinstance(self.contact_points, str) or not isinstance(
            self.contact_points, (tuple, list)
        ):
            raise ConfigError(
                "contactPoints must be a list of hosts, e.g. ['127.0.0.1'], got "
                f"{self.contact_points!r}"
            )
        # a tuple, for cache_key(): connections are shared per settings
        object.__setattr__(self, "contact_points", tuple(self.contact_points))
        if not self.contact_points:
            raise ConfigError("contactPoints must name at least one host, e.g. 127.0.0.1")
        for host in self.contact_points:
            if not isinstance(host, str) or not host or any(c.isspace() for c in host):
                raise ConfigError(f"contactPoints has an invalid host {host!r}")
        # frozen: a numeric string ('9042') is stored as the int the driver needs
        object.__setattr__(self, "port", validate.port(self.port))
        validate.keyspace_name(self.keyspace)
        for name, value in (
            ("consistency", self.consistency),
            ("serialConsistency", self.serial_consistency),
        ):
            if not isinstance(value, str):
                raise ConfigError(f"{name} must be a level name like LOCAL_QUORUM, got {value!r}")
        level = self.consistency.upper()
        if level in BELOW_QUORUM:
            raise ConfigError(
                f"consistency {self.consistency!r} is below a quorum: a reader could miss rows a "
                "writer has just written and pass them for good (message loss); use one of "
                f"{', '.join(CONSISTENCY_LEVELS)} (default LOCAL_QUORUM)"
            )
        if level not in CONSISTENCY_LEVELS:
            raise ConfigError(
                f"consistency must be one of {', '.join(CONSISTENCY_LEVELS)}, got {self.consistency!r}"
            )
        if self.serial_consistency.upper() not in SERIAL_LEVELS:
            raise ConfigError(
                f"serialConsistency must be one of {', '.join(SERIAL_LEVELS)}, got {self.serial_consistency!r}"
            )
        for name, limit_s in (
            ("connectTimeout", self.connect_timeout),
            ("requestTimeout", self.request_timeout),
        ):
            validate.seconds(limit_s, name, 3600.0, positive=True)
        if (self.username is None) != (self.password is None):
            raise ConfigError("username and password go together: give both or neither")

    @property
    def consistency_level(self) -> int:
        return ConsistencyLevel.name_to_value[self.consistency.upper()]

    @property
    def serial_consistency_level(self) -> int:
        return ConsistencyLevel.name_to_value[self.serial_consistency.upper()]

    def cache_key(self) -> tuple:
        """Identity of a connection, for per-process session reuse (includes the secret)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def describe(self) -> str:
        """For logs and errors: never includes the password."""
        user = f" as {self.username!r}" if self.username else ""
        return f"{','.join(self.contact_points)}:{self.port} keyspace {self.keyspace!r}{user}"

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.ssl_context_override is not None:
            return self.ssl_context_override
        if not self.ssl_enabled:
            return None
        for option, path in (
            ("sslCaFile", self.ssl_ca_file),
            ("sslCertFile", self.ssl_cert_file),
            ("sslKeyFile", self.ssl_key_file),
        ):
            if path is not None and not os.access(path, os.R_OK):
                why = "does not exist" if not os.path.exists(path) else "is not readable"
                raise ConfigError(f"option {option!r}: {path!r} {why}; give a readable PEM file")
        try:
            ctx = ssl.create_default_context(cafile=self.ssl_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"option 'sslCaFile': {self.ssl_ca_file!r} holds no usable CA certificate ({exc})"
            ) from None
        if not self.ssl_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.ssl_cert_file:
            try:
                ctx.load_cert_chain(self.ssl_cert_file, self.ssl_key_file)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"options 'sslCertFile'/'sslKeyFile': {self.ssl_cert_file!r} and its key do "
                    f"not make a usable client certificate ({exc})"
                ) from None
        return ctx


# Spark option name (lower-cased) -> (ConnectionConfig field, parser)
def _parse_bool(name: str, value: str) -> bool:
    return validate.boolean(value, name)


def _parse_int(name: str, value: str) -> int:
    return validate.int_option(value, name)


def _parse_float(name: str, value: str) -> float:
    return validate.float_option(value, name)


def _parse_hosts(value: str) -> tuple[list[str], int | None]:
    hosts, port = [], None
    for part in str(value).split(","):
        part = part.strip()
        if not part:
            continue
        if part.count(":") == 1:
            host, _, p = part.partition(":")
            if not p.strip().isdigit():
                raise ConfigError(
                    f"option 'contactPoints' has {part!r}: the port after ':' must be an "
                    f"integer, got {p!r}"
                )
            port = int(p)
            part = host
        hosts.append(part)
    if not hosts:
        raise ConfigError("option 'contactPoints' must name at least one host, e.g. 127.0.0.1")
    return hosts, port


CONNECTION_OPTIONS = {
    "contactpoints": "contactPoints",
    "port": "port",
    "keyspace": "keyspace",
    "localdc": "localDc",
    "username": "username",
    "password": "password",
    "passwordfile": "passwordFile",
    "ssl": "ssl",
    "sslcafile": "sslCaFile",
    "sslcertfile": "sslCertFile",
    "sslkeyfile": "sslKeyFile",
    "sslverify": "sslVerify",
    "consistency": "consistency",
    "serialconsistency": "serialConsistency",
    "connecttimeout": "connectTimeout",
    "requesttimeout": "requestTimeout",
}


def connection_from_options(
    options: Mapping[str, str], known_only: bool = False
) -> ConnectionConfig:
    """Build a ConnectionConfig from Spark-style options (keys case-insensitive, values
    strings); ``known_only``: any other option name is an error (a typo, e.g. ``consistensy``)."""
    o = {str(k).lower(): v for k, v in options.items() if v is not None}
    if known_only:
        validate.known_options(o, CONNECTION_OPTIONS, "connection")
    kw: dict = {}
    if "contactpoints" in o:
        hosts, port = _parse_hosts(o["contactpoints"])
        kw["contact_points"] = tuple(hosts)
        if port is not None:
            kw["port"] = port
    if "port" in o:
        kw["port"] = _parse_int("port", o["port"])
    if "keyspace" in o:
        kw["keyspace"] = str(o["keyspace"])
    if o.get("localdc"):
        kw["local_dc"] = str(o["localdc"])
    if "username" in o:
        kw["username"] = str(o["username"])
    if "password" in o and "passwordfile" in o:
        raise ConfigError("options 'password' and 'passwordFile' exclude each other: give one")
    if "password" in o:
        kw["password"] = str(o["password"])
    if "passwordfile" in o:
        kw["password"] = read_password_file(str(o["passwordfile"]))
    if "ssl" in o:
        kw["ssl_enabled"] = _parse_bool("ssl", o["ssl"])
    for opt, fld in (
        ("sslcafile", "ssl_ca_file"),
        ("sslcertfile", "ssl_cert_file"),
        ("sslkeyfile", "ssl_key_file"),
    ):
        if opt in o:
            kw[fld] = str(o[opt])
    if "sslverify" in o:
        kw["ssl_verify"] = _parse_bool("sslVerify", o["sslverify"])
    if "consistency" in o:
        kw["consistency"] = str(o["consistency"]).upper()
    if "serialconsistency" in o:
        kw["serial_consistency"] = str(o["serialconsistency"]).upper()
    if "connecttimeout" in o:
        kw["connect_timeout"] = _parse_float("connectTimeout", o["connecttimeout"])
    if "requesttimeout" in o:
        kw["request_timeout"] = _parse_float("requestTimeout", o["requesttimeout"])
    return ConnectionConfig(**kw)


def read_password_file(path: str) -> str:
    """The password in ``path`` (its first line), read where the connection is made: on a Spark
    cluster the file must be there on every executor too (ship it with ``--files``)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(
            f"option 'passwordFile': cannot read {path!r} ({exc.strerror or exc}); give a "
            "readable file whose first line is the password"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"option 'passwordFile': {path!r} is not UTF-8 text") from None
    if not lines or not lines[0]:
        raise ConfigError(
            f"option 'passwordFile': {path!r} is empty; its first line is the password"
        )
    return lines[0]


ENV_PREFIX = "CASSIEQ_"


def env_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``CASSIEQ_CONTACT_POINTS`` etc. as Spark-style option names, for the CLI and jobs."""
    env = os.environ if environ is None else environ
    names = {
        "CONTACT_POINTS": "contactPoints",
        "PORT": "port",
        "KEYSPACE": "keyspace",
        "LOCAL_DC": "localDc",
        "USERNAME": "username",
        "PASSWORD": "password",
        "PASSWORD_FILE": "passwordFile",
        "SSL": "ssl",
        "SSL_CA_FILE": "sslCaFile",
        "SSL_CERT_FILE": "sslCertFile",
        "SSL_KEY_FILE": "sslKeyFile",
        "SSL_VERIFY": "sslVerify",
        "CONSISTENCY": "consistency",
    }
    return {opt: env[ENV_PREFIX + k] for k, opt in names.items() if env.get(ENV_PREFIX + k)}


# -- command lines (`cassieq`, jobs/repair.py) ---------------------------------------------------

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
    opts = env_defaults()
    for flag, name in _FLAGS:
        value = getattr(args, flag, None)
        if value is not None:
            if name in ("password", "passwordFile"):  # a flag beats either variable
                opts.pop("password", None)
                opts.pop("passwordFile", None)
            opts[name] = value
    return opts


# -- replication: what the consistency levels need -------------------------------------------------


def replica_data_centers(
    replication: Mapping[str, object] | None, cluster_dcs: Iterable[str]
) -> set[str]:
    """The data centers holding replicas of a keyspace with ``replication`` (its CQL map)."""
    if not replication:
        return set(cluster_dcs)
    strategy = str(replication.get("class", ""))
    if strategy.endswith("NetworkTopologyStrategy"):
        out = set()
        for dc, rf in replication.items():
            if dc in ("class", "replication_factor"):
                continue
            try:
                if int(str(rf).split("/")[0]) > 0:  # "3/1": 3 replicas, 1 transient
                    out.add(dc)
            except ValueError:
                out.add(dc)
        return out
    # SimpleStrategy and others place replicas wherever the ring puts them.
    return set(cluster_dcs)


def check_replication(
    config: ConnectionConfig, replication: Mapping[str, object] | None, cluster_dcs: Iterable[str]
) -> None:
    """Refuse data-center-local levels for a keyspace replicated to several data centers.

    LOCAL_SERIAL runs Paxos among one data center's replicas: writers in two data centers both
    win ``IF next = ?`` (the same ids twice) and consumers in two both claim one message.
    LOCAL_QUORUM lets a reader in one data center see a block closed before its rows arrive
    from the other, and pass them. Single data center: LOCAL_* equal their global levels.
    """
    dcs = replica_data_centers(replication, cluster_dcs)
    if len(dcs) < 2:
        return
    local = [
        f"{name} {value}"
        for name, value in (
            ("serialConsistency", config.serial_consistency.upper()),
            ("consistency", config.consistency.upper()),
        )
        if value.startswith("LOCAL_")
    ]
    if local:
        raise ConfigError(
            f"keyspace {config.keyspace!r} replicates to data centers {', '.join(sorted(dcs))}: "
            f"{' and '.join(local)} would let each data center reserve the same ids and claim "
            "the same message; use serialConsistency=SERIAL and consistency=QUORUM (or "
            "EACH_QUORUM)"
        )


def check_cluster(config: ConnectionConfig, metadata) -> None:
    """:func:`check_replication` against a driver ``Metadata`` (no-op while the keyspace does
    not exist: bootstrap checks again once it is created)."""
    ks = metadata.keyspaces.get(config.keyspace)
    if ks is None:
        return
    strategy = ks.replication_strategy
    replication: dict[str, object] = {"class": type(strategy).__name__}
    factors = getattr(strategy, "dc_replication_factors", None)
    if factors is not None:
        replication.update(factors)
    cluster_dcs = {h.datacenter for h in metadata.all_hosts() if h.datacenter}
    check_replication(config, replication, cluster_dcs)
