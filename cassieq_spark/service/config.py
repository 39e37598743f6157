"""The service's settings: flags first, then ``CASSIEQ_*`` variables, then the original
CassieQ server's variable names (``CLUSTER_NAME``, ``KEYSPACE``, ``CONTACT_POINTS``,
``USERNAME``, ``PASSWORD``, ``USE_SSL``, ``DATA_CENTER``), then defaults. The service
secret and the admin key come from files or variables, never from a flag's value; the Cassandra
password is the connection's, which every ``cassieq`` command also takes as ``--password``
(shown by ``ps``: ``--password-file`` or ``CASSIEQ_PASSWORD`` keep it out of the process list).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

# The original server's environment, mapped to the project's Spark-style option names.
ORIGINAL_ENV = {
    "CONTACT_POINTS": "contactPoints",
    "KEYSPACE": "keyspace",
    "USERNAME": "username",
    "PASSWORD": "password",
    "USE_SSL": "ssl",
    "DATA_CENTER": "localDc",
}
DEFAULT_HTTP_PORT = 8080
DEFAULT_SKEW_SECONDS = 60.0
DEFAULT_MAX_BODY_BYTES = 1024 * 1024 + 4096
DEFAULT_REPAIR_INTERVAL = 5.0
DEFAULT_DRAIN_SECONDS = 30.0
DEFAULT_WORKERS = 32
# A signed URL ends at most this long after it is used (and, issued without an end time, ends
# DEFAULT_SIGNED_URL_SECONDS after it is issued): a leaked URL stops working by itself.
DEFAULT_SIGNED_URL_MAX_SECONDS = 7 * 24 * 3600.0
DEFAULT_SIGNED_URL_SECONDS = 24 * 3600.0
# The admin key and the metrics key: long and varied enough that guessing is hopeless at the
# rate failed attempts are allowed (`secrets.token_urlsafe(24)` gives 32 characters).
# The service secret seals every account key: at least this many bytes (after base64).
MIN_SECRET_BYTES = 32
MIN_OPERATOR_KEY_CHARS = 32
MIN_OPERATOR_KEY_DISTINCT = 16
DEFAULT_MAX_REQUESTS = 1024
DEFAULT_MAX_WAITING_CALLS = 512
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
DEFAULT_DRAIN_NOTICE = 0.0
DEFAULT_STATS_SECONDS = 10.0
MAX_SECRET_FILE_BYTES = 64 * 1024


def original_env_options(
    have: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Options from the original's variable names, for those ``have`` (flags and
    ``CASSIEQ_*``) does not set. ``CLUSTER_NAME`` only names the cluster in logs."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for var, option in ORIGINAL_ENV.items():
        value = env.get(var)
        if not value or option in have or (option == "password" and "passwordFile" in have):
            continue
        if option == "contactPoints" and ":" not in value:
            value = ",".join(h.strip() for h in value.split(",") if h.strip())
        if option == "ssl":
            value = "true" if value.strip().lower() in ("true", "1", "yes") else "false"
        out[option] = value
    return out


def read_secret(
    what: str, file_flag: str | None, env_file: str, env_value: str, environ: Mapping[str, str]
) -> bytes | None:
    """A secret from a file (flag, then ``env_file``) or from ``env_value``; None if none."""
    path = file_flag or environ.get(env_file)
    if path:
        try:
            # A regular file only: opening a FIFO would wait for a writer for ever, and a
            # device such as /dev/zero never ends.
            if not Path(path).is_file():
                raise ConfigError(
                    f"the {what} file {path!r} is not a regular file; give a file that holds it"
                )
            with Path(path).open("rb") as f:
                data = f.read(MAX_SECRET_FILE_BYTES + 1).strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} from {path!r}: {exc.strerror}") from None
        if len(data) > MAX_SECRET_FILE_BYTES:
            raise ConfigError(
                f"the {what} file {path!r} has more than {MAX_SECRET_FILE_BYTES} bytes; "
                "it should hold one secret"
            )
        if not data:
            raise ConfigError(f"the {what} file {path!r} is empty")
        return data
    value = environ.get(env_value)
    return value.strip().encode() if value and value.strip() else None


@dataclass
class ServiceConfig:
    host: str = "127.0.0.1"
    http_port: int = DEFAULT_HTTP_PORT
    secret: bytes = b""
    admin_key: str | None = None
    metrics_key: str | None = None
    public_metrics: bool = False
    signed_url_max_seconds: float = DEFAULT_SIGNED_URL_MAX_SECONDS
    skew_seconds: float = DEFAULT_SKEW_SECONDS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    repair: bool = False
    repair_interval: float = DEFAULT_REPAIR_INTERVAL
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    workers: int = DEFAULT_WORKERS
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_waiting_calls: int = DEFAULT_MAX_WAITING_CALLS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    drain_notice: float = DEFAULT_DRAIN_NOTICE
    stats_seconds: float = DEFAULT_STATS_SECONDS
    cluster_name: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    instance: str = ""

    def secret_bytes(self) -> bytes:
        """The secret as given; a base64 text of 32+ bytes is decoded first."""
        try:
            raw = base64.b64decode(self.secret, validate=True)
            if len(raw) >= MIN_SECRET_BYTES:
                return raw
        except ValueError:
            pass
        return self.secret


def operator_key(what: str, flag: str, raw: bytes | None) -> str | None:
    """The admin or metrics key as text, refused when it is too weak to face the internet."""
    if raw is None:
        return None
    try:
        key = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"the {what} must be ASCII text ({flag})") from None
    if len(key) < MIN_OPERATOR_KEY_CHARS or len(set(key)) < MIN_OPERATOR_KEY_DISTINCT:
        raise ConfigError(
            f"the {what} ({flag}) has {len(key)} characters, {len(set(key))} of them distinct; "
            f"it needs at least {MIN_OPERATOR_KEY_CHARS} characters with "
            f"{MIN_OPERATOR_KEY_DISTINCT} distinct (make one with: python3 -c "
            "'import secrets; print(secrets.token_urlsafe(32))' > FILE)"
        )
    return key
