"""One Cassandra connection's settings, checked when they are made.

Every way in (Spark options, command-line flags, keyword arguments) ends in one
:class:`ConnectionConfig`; the checks that keep the queue's guarantees (a quorum at least) live
in its constructor so no path can skip them.
"""

from __future__ import annotations

import importlib
import os
import ssl
from dataclasses import dataclass, field, fields
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.auth import AuthProvider, PlainTextAuthProvider

from .. import validate
from ..errors import ConfigError

# Every "a closed block's rows are visible to the next reader" and "a plain row below the reader
# was consumed" argument needs reads and writes that overlap (R + W > RF): a quorum at least.
CONSISTENCY_LEVELS = ("LOCAL_QUORUM", "QUORUM", "EACH_QUORUM", "ALL")
BELOW_QUORUM = ("ANY", "ONE", "TWO", "THREE", "LOCAL_ONE")
SERIAL_LEVELS = ("SERIAL", "LOCAL_SERIAL")


def _flag(option: str) -> str:
    """The command-line flag of a connection option: sslCaFile -> ssl-ca-file."""
    return "".join("-" + c.lower() if c.isupper() else c for c in option)


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
    # A managed service's secure-connect bundle (Astra): the driver reads the contact points,
    # port and TLS material from it, so those options must be left out.
    secure_connect_bundle: str | None = None
    # Any driver authenticator (Kerberos, LDAP, a cloud IAM plug-in); excludes username/password.
    auth_provider: AuthProvider | None = field(default=None, repr=False, compare=False)
    # The dotted path it was loaded from (options, flags): what a pickled copy carries to a
    # Spark executor, which loads the provider again there (providers need not pickle).
    auth_provider_path: str | None = None

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
        if self.auth_provider is not None:
            if not isinstance(self.auth_provider, AuthProvider):
                raise ConfigError(
                    "authProvider must be a cassandra.auth.AuthProvider (or the dotted path of "
                    f"a callable that returns one), got {type(self.auth_provider).__name__}"
                )
            if self.username is not None:
                raise ConfigError(
                    "give an auth provider or a username and password, not both (the provider "
                    "does the authentication)"
                )
        self._check_tls_options()
        self._check_bundle()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.auth_provider_path is not None:
            state["auth_provider"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
        if self.auth_provider is None and self.auth_provider_path is not None:
            object.__setattr__(self, "auth_provider", load_auth_provider(self.auth_provider_path))

    def _check_bundle(self) -> None:
        """A bundle holds the endpoint and its TLS material: options that set them too would
        be ignored by the driver, or refused by it late with a less clear error."""
        if self.secure_connect_bundle is None:
            return
        if not isinstance(self.secure_connect_bundle, str) or not self.secure_connect_bundle:
            raise ConfigError(
                "secureConnectBundle must be the path of a secure-connect bundle (a .zip), got "
                f"{self.secure_connect_bundle!r}"
            )
        clash = [
            name
            for name, given in (
                ("contactPoints", self.contact_points != ("127.0.0.1",)),
                ("port", self.port != 9042),
                ("ssl", self.ssl_enabled or self.ssl_context_override is not None),
                ("localDc", self.local_dc is not None),
            )
            if given
        ]
        if clash:
            raise ConfigError(
                f"option {clash[0]!r} (--{_flag(clash[0])}) does not go with secureConnectBundle: "
                "the bundle names the service's hosts, port, data center and TLS certificates; "
                f"drop {', '.join(clash)}"
            )

    def _check_tls_options(self) -> None:
        """TLS options mean something only with ``ssl`` on, and a client key only with its
        certificate: either alone would be ignored without a word (a plaintext connection,
        or TLS without the client certificate the node asks for)."""
        if self.ssl_context_override is not None:
            return
        files = (
            ("sslCaFile", self.ssl_ca_file),
            ("sslCertFile", self.ssl_cert_file),
            ("sslKeyFile", self.ssl_key_file),
        )
        if not self.ssl_enabled:
            given = [name for name, path in files if path is not None]
            given += [] if self.ssl_verify else ["sslVerify"]
            if given:
                raise ConfigError(
                    f"option {given[0]!r} (--{_flag(given[0])}) applies only to TLS, and ssl is "
                    "not true: add ssl=true (--ssl true, CASSIEQ_SSL=true), or drop "
                    f"{', '.join(given)}"
                )
        if self.ssl_key_file is not None and self.ssl_cert_file is None:
            raise ConfigError(
                "option 'sslKeyFile' (--ssl-key-file) is the key of a client certificate, and "
                "'sslCertFile' (--ssl-cert-file) is not given: give both, or neither"
            )

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
        if self.secure_connect_bundle is not None:
            where = f"the service of bundle {self.secure_connect_bundle}"
        else:
            where = f"{','.join(self.contact_points)}:{self.port}"
        return f"{where} keyspace {self.keyspace!r}{user}"

    def authenticator(self) -> AuthProvider | None:
        """The driver's auth provider: the one given, else plain text for a username."""
        if self.auth_provider is not None:
            return self.auth_provider
        if self.username is not None:
            return PlainTextAuthProvider(username=self.username, password=self.password)
        return None

    def cluster_arguments(self) -> dict[str, Any]:
        """The endpoint arguments of the driver's ``Cluster``: ``contact_points``, ``port`` and
        ``ssl_context``, or with a bundle ``cloud={'secure_connect_bundle': path}``; and
        ``auth_provider``. The bundle must be a readable file (checked here, where it is used,
        not in the constructor: Spark checks options on the driver, executors connect)."""
        kw: dict[str, Any] = {"auth_provider": self.authenticator()}
        if self.secure_connect_bundle is None:
            kw.update(
                contact_points=list(self.contact_points),
                port=self.port,
                ssl_context=self.ssl_context(),
            )
            return kw
        path = self.secure_connect_bundle
        if not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise ConfigError(
                f"option 'secureConnectBundle': {path!r} is not a readable file; download the "
                "database's secure-connect bundle (a .zip) and give its path on every machine "
                "that connects (Spark: every executor)"
            )
        kw["cloud"] = {"secure_connect_bundle": path}
        return kw

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
            if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                why = (
                    "does not exist"
                    if not os.path.exists(path)
                    else "is not a regular file"
                    if not os.path.isfile(path)
                    else "is not readable"
                )
                raise ConfigError(f"option {option!r}: {path!r} {why}; give a readable PEM file")
        try:
            ctx = ssl.create_default_context(cafile=self.ssl_ca_file)
        except OSError as exc:  # ssl.SSLError is one too
            if not isinstance(exc, ssl.SSLError):
                raise ConfigError(
                    f"option 'sslCaFile': cannot read {self.ssl_ca_file!r} "
                    f"({exc.strerror or exc}); give a readable PEM file"
                ) from None
            raise ConfigError(
                f"option 'sslCaFile': {self.ssl_ca_file!r} holds no usable CA certificate ({exc})"
            ) from None
        if not self.ssl_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.ssl_cert_file:
            try:
                ctx.load_cert_chain(self.ssl_cert_file, self.ssl_key_file)
            except OSError as exc:  # ssl.SSLError is one too
                raise ConfigError(
                    f"options 'sslCertFile'/'sslKeyFile': {self.ssl_cert_file!r} and its key do "
                    f"not make a usable client certificate ({exc})"
                ) from None
        return ctx


_providers: dict[str, AuthProvider] = {}


def load_auth_provider(path: str) -> AuthProvider:
    """The auth provider a dotted path names: ``package.module:callable`` or
    ``package.module.callable``, called with no arguments (a class or a factory that reads its
    own settings, e.g. from the environment). For Spark options and command-line flags, which
    carry text only. Called once per path and process: the same provider object each time, so
    connections made from the same options are shared (their cache key includes it)."""
    cached = _providers.get(path) if isinstance(path, str) else None
    if cached is not None:
        return cached
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"authProvider must be a dotted path like pkg.mod:factory, got {path!r}")
    module_name, sep, attr = path.strip().partition(":")
    if not sep:
        module_name, _, attr = module_name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"authProvider {path!r} names no callable: give package.module:callable")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"authProvider {path!r}: cannot import it ({exc}); install the module where the "
            "connection is made (Spark: the driver and every executor)"
        ) from None
    try:
        provider = target()
    except Exception as exc:
        raise ConfigError(f"authProvider {path!r} failed when called: {exc}") from None
    if not isinstance(provider, AuthProvider):
        raise ConfigError(
            f"authProvider {path!r} returned a {type(provider).__name__}, not a "
            "cassandra.auth.AuthProvider"
        )
    _providers[path] = provider
    return provider
