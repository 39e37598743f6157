"""Spark-style connection options (case-insensitive names, string values) and the
``CASSIEQ_*`` environment variables, turned into a :class:`ConnectionConfig`.

Spark hands options over as a case-insensitive dict of strings; the CLI and the jobs reuse the
same names, so an option is parsed and refused in one place whatever it came from.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping

from .. import validate
from ..errors import ConfigError
from .connection import ConnectionConfig, load_auth_provider


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
            if not (p.strip().isascii() and p.strip().isdigit()):
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


URL_SCHEME = "cassieq://"
URL_FORM = "cassieq://[user@]host[,host...][:port]/keyspace"


def parse_url(url: str, what: str = "option 'url'") -> dict[str, str]:
    """A connection URL, ``cassieq://user@host:port/keyspace``, as the connection options it
    stands for (``contactPoints``, ``port``, ``keyspace``, ``username``; each part but the host
    optional). A password is never part of it (URLs end up in shell histories and logs): give
    it with ``passwordFile``/``--password-file`` or ``CASSIEQ_PASSWORD``."""

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"{what} {url!r} is not a connection URL: {why}; the form is {URL_FORM}, e.g. "
            "cassieq://app@10.0.0.5:9042/queues"
        )

    if not isinstance(url, str):
        raise refuse("not text")
    text = url.strip()
    if not text.lower().startswith(URL_SCHEME):
        raise refuse(f"it must start with {URL_SCHEME}")
    rest = text[len(URL_SCHEME) :]
    if any(c in rest for c in "?#") or any(c.isspace() for c in rest):
        raise refuse("no spaces, query ('?') or fragment ('#') are allowed")
    netloc, slash, path = rest.partition("/")
    out: dict[str, str] = {}
    if "@" in netloc:
        user, _, netloc = netloc.rpartition("@")
        if ":" in user:
            raise refuse(
                "it holds a password; give the password with passwordFile (--password-file) "
                "or CASSIEQ_PASSWORD instead"
            )
        if not user:
            raise refuse("the user before '@' is empty")
        out["username"] = user
    if not netloc:
        raise refuse("it names no host")
    hosts = [h.strip() for h in netloc.split(",")]
    if not all(hosts):
        raise refuse("a host between commas is empty")
    last, colon, port = hosts[-1].rpartition(":")
    if colon:
        if not (port.isascii() and port.isdigit()):
            raise refuse(f"the port {port!r} is not a number")
        hosts[-1] = last
        out["port"] = str(validate.port(int(port), f"the port of {what}"))
    if any(":" in h or not h for h in hosts):
        raise refuse("only the last host may carry the port (host1,host2:9042)")
    out["contactPoints"] = ",".join(hosts)
    if slash and path:
        if "/" in path:
            raise refuse("the path is one keyspace name")
        out["keyspace"] = validate.keyspace_name(path)
    return out


CONNECTION_OPTIONS = {
    "url": "url",
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
    "secureconnectbundle": "secureConnectBundle",
    "authprovider": "authProvider",
}


def connection_from_options(
    options: Mapping[str, str], known_only: bool = False
) -> ConnectionConfig:
    """Build a ConnectionConfig from Spark-style options (keys case-insensitive, values
    strings); ``known_only``: any other option name is an error (a typo, e.g. ``consistensy``).
    Option ``url`` (:func:`parse_url`) stands for the options it holds; one given beside it
    wins over the URL's part."""
    o = {str(k).lower(): v for k, v in options.items() if v is not None}
    if known_only:
        validate.known_options(o, CONNECTION_OPTIONS, "connection")
    if "url" in o:
        parts = {k.lower(): v for k, v in parse_url(o.pop("url")).items()}
        o = {**parts, **o}
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
    if o.get("secureconnectbundle"):
        kw["secure_connect_bundle"] = str(o["secureconnectbundle"])
    if o.get("authprovider"):
        kw["auth_provider"] = load_auth_provider(str(o["authprovider"]))
        kw["auth_provider_path"] = str(o["authprovider"])
    return ConnectionConfig(**kw)


MAX_SECRET_FILE_BYTES = 4096  # a password file is read up to this size, no further


def read_password_file(path: str, option: str = "passwordFile") -> str:
    """The password in ``path`` (its first line), read where the connection is made: on a Spark
    cluster the file must be there on every executor too (ship it with ``--files``).

    Only a regular file is read, opened without blocking (a FIFO nobody writes, a device such
    as /dev/zero are refused at once) and no further than :data:`MAX_SECRET_FILE_BYTES`; a
    UTF-8 byte order mark (as Notepad writes) is dropped. ``option`` names the option or flag
    the path came from in every error."""

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"option {option!r}: {why}; give a regular file whose first line is the password"
        )

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise refuse(f"cannot read {path!r} ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse(f"{path!r} is not a regular file")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise refuse(f"cannot read {path!r} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    first, newline, _ = data.partition(b"\n")
    if not newline and len(data) > MAX_SECRET_FILE_BYTES:
        raise refuse(f"the first line of {path!r} is longer than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        line = first.decode("utf-8-sig").rstrip("\r")
    except UnicodeDecodeError:
        raise ConfigError(f"option {option!r}: {path!r} is not UTF-8 text") from None
    if not line:
        raise ConfigError(f"option {option!r}: {path!r} is empty; its first line is the password")
    return line


ENV_PREFIX = "CASSIEQ_"


def env_defaults(
    environ: Mapping[str, str] | None = None, overridden: Iterable[str] = ()
) -> dict[str, str]:
    """``CASSIEQ_CONTACT_POINTS`` etc. as Spark-style option names, for the CLI and jobs.

    A variable set to an empty string is an error, unless ``overridden`` (option names given
    another way, e.g. by a flag) names its option: an empty ``CASSIEQ_KEYSPACE`` taken for
    "unset" ran commands against the default keyspace, someone else's."""
    env = os.environ if environ is None else environ
    skip = set(overridden)
    names = {
        "URL": "url",
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
        "SECURE_CONNECT_BUNDLE": "secureConnectBundle",
        "AUTH_PROVIDER": "authProvider",
    }
    for k, opt in names.items():
        value = env.get(ENV_PREFIX + k)
        if value is not None and not value.strip() and opt not in skip:
            raise ConfigError(
                f"variable {ENV_PREFIX + k} is set but empty: give it a value (option {opt!r}) "
                f"or unset it (unset {ENV_PREFIX + k})"
            )
    return {
        opt: env[ENV_PREFIX + k]
        for k, opt in names.items()
        if env.get(ENV_PREFIX + k) and opt not in skip
    }
