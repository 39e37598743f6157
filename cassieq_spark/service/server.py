"""``cassieq serve``: flags, the uvicorn server, and the repair loop.

uvicorn handles SIGTERM and SIGINT: it stops accepting connections, lets the requests in
flight finish (at most ``--drain-seconds``, longer than the longest long poll), then stops.
With ``--repair`` the instance also runs the engine's repair over every queue, every
``--repair-interval`` seconds, but only while it holds the ``repair`` lease in Cassandra (a row
with a TTL, taken and renewed with compare-and-sets), so one instance at a time repairs.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import threading
from collections.abc import Mapping
from typing import Any

from ..config import connection_from_options, options_from_flags
from ..errors import ConfigError, QueueNotFoundError
from . import config as cfg
from .config import ServiceConfig, operator_key, original_env_options, read_secret

log = logging.getLogger(__name__)

LEASE_NAME = "repair"
H11_MAX_EVENT_BYTES = 256 * 1024


def add_serve_flags(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "serve",
        help="the CassieQ-compatible HTTP service (docs/service.md); needs the [server] extra",
    )
    s.add_argument("--http-host", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--http-port", help=f"port to listen on (default {cfg.DEFAULT_HTTP_PORT})")
    s.add_argument(
        "--secret-file",
        metavar="FILE",
        help="the service secret that seals account keys (or CASSIEQ_SECRET_FILE, CASSIEQ_SECRET)",
    )
    s.add_argument(
        "--admin-key-file",
        metavar="FILE",
        help="the admin API's key (or CASSIEQ_ADMIN_KEY_FILE, CASSIEQ_ADMIN_KEY); none: admin off",
    )
    s.add_argument(
        "--metrics-key-file",
        metavar="FILE",
        help="a key for GET /metrics and the dashboard data besides the admin key (or "
        "CASSIEQ_METRICS_KEY_FILE, CASSIEQ_METRICS_KEY)",
    )
    s.add_argument(
        "--public-metrics",
        action="store_true",
        help="serve GET /metrics without a key: it shows every account's queue names, "
        "backlogs and rates to anyone who reaches the port",
    )
    for flag, (_, default, low, high, whole, what) in SETTINGS.items():
        kind = int if whole else float
        s.add_argument(
            flag,
            type=kind,
            default=None,
            help=f"{what} (default {int(default) if whole else default:g}, {low:g} to {high:g})",
        )
    s.add_argument("--repair", action="store_true", help="run repair here (one instance at a time)")
    s.add_argument("--bootstrap", action="store_true", help="create or migrate the schema first")
    s.add_argument("--create-keyspace", action="store_true", help="with --bootstrap")
    s.add_argument("--tls-cert-file", metavar="PEM", help="serve HTTPS with this certificate")
    s.add_argument("--tls-key-file", metavar="PEM", help="and this key")


# Each bounded setting: flag -> (environment variable, default, lowest, highest, whole number,
# what it is). Every value is range-checked at start: a value outside the range would start a
# service that refuses, opens or hangs every request (a skew of nan, 0 workers, ...).
SETTINGS: dict[str, tuple[str, float, float, float, bool, str]] = {
    "--clock-skew": (
        "CASSIEQ_CLOCK_SKEW",
        cfg.DEFAULT_SKEW_SECONDS,
        1,
        3600,
        False,
        "how far a signed request's time may be from the server's clock, s",
    ),
    "--max-body-bytes": (
        "CASSIEQ_MAX_BODY_BYTES",
        cfg.DEFAULT_MAX_BODY_BYTES,
        1024,
        64 * 1024 * 1024,
        True,
        "largest request body, bytes",
    ),
    "--repair-interval": (
        "CASSIEQ_REPAIR_INTERVAL",
        cfg.DEFAULT_REPAIR_INTERVAL,
        1,
        86400,
        False,
        "seconds between repair passes",
    ),
    "--drain-seconds": (
        "CASSIEQ_DRAIN_SECONDS",
        cfg.DEFAULT_DRAIN_SECONDS,
        0,
        3600,
        False,
        "on SIGTERM, how long requests in flight may finish, s",
    ),
    "--drain-notice-seconds": (
        "CASSIEQ_DRAIN_NOTICE_SECONDS",
        cfg.DEFAULT_DRAIN_NOTICE,
        0,
        600,
        False,
        "on SIGTERM, how long to keep accepting while /ready answers 503 draining, s",
    ),
    "--workers": (
        "CASSIEQ_WORKERS",
        cfg.DEFAULT_WORKERS,
        1,
        1024,
        True,
        "engine calls at once (worker threads, each with a pooled client)",
    ),
    "--max-requests": (
        "CASSIEQ_MAX_REQUESTS",
        cfg.DEFAULT_MAX_REQUESTS,
        1,
        100_000,
        True,
        "requests in progress at once; beyond, 503 with Retry-After",
    ),
    "--max-waiting-calls": (
        "CASSIEQ_MAX_WAITING_CALLS",
        cfg.DEFAULT_MAX_WAITING_CALLS,
        0,
        100_000,
        True,
        "engine calls waiting for a worker; beyond, 503 with Retry-After",
    ),
    "--header-timeout": (
        "CASSIEQ_HEADER_TIMEOUT",
        cfg.DEFAULT_HEADER_TIMEOUT,
        0.5,
        3600,
        False,
        "seconds a client has to send a request's headers; then the connection is closed",
    ),
    "--body-timeout": (
        "CASSIEQ_BODY_TIMEOUT",
        cfg.DEFAULT_BODY_TIMEOUT,
        0.5,
        3600,
        False,
        "seconds a client has to send a request's body; then 408",
    ),
    "--stats-seconds": (
        "CASSIEQ_STATS_SECONDS",
        cfg.DEFAULT_STATS_SECONDS,
        1,
        3600,
        False,
        "how often the queue stats of /metrics and the dashboard are refreshed, s",
    ),
    "--signed-url-max-seconds": (
        "CASSIEQ_SIGNED_URL_MAX_SECONDS",
        cfg.DEFAULT_SIGNED_URL_MAX_SECONDS,
        60,
        366 * 24 * 3600,
        False,
        "longest lifetime of a signed URL, from its use to its end time, s",
    ),
    "--max-response-bytes": (
        "CASSIEQ_MAX_RESPONSE_BYTES",
        cfg.DEFAULT_MAX_RESPONSE_BYTES,
        64 * 1024,
        1024 * 1024 * 1024,
        True,
        "payload bytes in one v2 receive's answer (at least one message)",
    ),
}


def setting(args: argparse.Namespace, flag: str, environ: Mapping[str, str]) -> float:
    """A bounded setting: the flag, else its variable, else its default; refused with
    ``ConfigError`` (naming the flag, the variable and the range) outside its range."""
    env, default, low, high, whole, _ = SETTINGS[flag]
    value = _number(getattr(args, flag[2:].replace("-", "_"), None), env, environ, default)
    if not (low <= value <= high) or (whole and not float(value).is_integer()):
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{flag} ({env}) must be {kind} from {low:g} to {high:g}, got {value!r}")
    return int(value) if whole else float(value)


def _number(value: object, env: str, environ: Mapping[str, str], default: float) -> float:
    raw = value if value is not None else environ.get(env)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)  # type: ignore[arg-type]
    except ValueError:
        raise ConfigError(f"{env}: expected a number, got {raw!r}") from None


def service_config(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    env = os.environ if environ is None else environ
    secret = read_secret(
        "service secret", args.secret_file, "CASSIEQ_SECRET_FILE", "CASSIEQ_SECRET", env
    )
    if secret is None:
        raise ConfigError(
            "cassieq serve needs the service secret that seals account keys: --secret-file FILE "
            "(or CASSIEQ_SECRET_FILE / CASSIEQ_SECRET); make one with "
            "`head -c 32 /dev/urandom | base64 > FILE` and keep it out of Cassandra"
        )
    have = len(ServiceConfig(secret=secret).secret_bytes())
    if have < cfg.MIN_SECRET_BYTES:
        raise ConfigError(
            f"the service secret has {have} bytes; it needs at least {cfg.MIN_SECRET_BYTES} "
            "(make one with `head -c 32 /dev/urandom | base64 > FILE`)"
        )
    admin = read_secret(
        "admin key", args.admin_key_file, "CASSIEQ_ADMIN_KEY_FILE", "CASSIEQ_ADMIN_KEY", env
    )
    metrics = read_secret(
        "metrics key",
        getattr(args, "metrics_key_file", None),
        "CASSIEQ_METRICS_KEY_FILE",
        "CASSIEQ_METRICS_KEY",
        env,
    )
    port = int(_number(args.http_port, "CASSIEQ_HTTP_PORT", env, cfg.DEFAULT_HTTP_PORT))
    if not 0 <= port <= 65535:
        raise ConfigError(f"--http-port must be from 0 to 65535, got {port}")
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        raise ConfigError("--tls-cert-file and --tls-key-file go together")
    return ServiceConfig(
        host=args.http_host or env.get("CASSIEQ_HTTP_HOST") or "127.0.0.1",
        http_port=port,
        secret=secret,
        admin_key=operator_key("admin key", "--admin-key-file", admin),
        metrics_key=operator_key("metrics key", "--metrics-key-file", metrics),
        public_metrics=bool(getattr(args, "public_metrics", False))
        or env.get("CASSIEQ_PUBLIC_METRICS", "").strip().lower() in ("1", "true", "yes"),
        signed_url_max_seconds=setting(args, "--signed-url-max-seconds", env),
        skew_seconds=setting(args, "--clock-skew", env),
        max_body_bytes=int(setting(args, "--max-body-bytes", env)),
        repair=bool(args.repair),
        repair_interval=setting(args, "--repair-interval", env),
        drain_seconds=setting(args, "--drain-seconds", env),
        drain_notice=setting(args, "--drain-notice-seconds", env),
        workers=int(setting(args, "--workers", env)),
        max_requests=int(setting(args, "--max-requests", env)),
        max_waiting_calls=int(setting(args, "--max-waiting-calls", env)),
        header_timeout=setting(args, "--header-timeout", env),
        body_timeout=setting(args, "--body-timeout", env),
        max_response_bytes=int(setting(args, "--max-response-bytes", env)),
        stats_seconds=setting(args, "--stats-seconds", env),
        cluster_name=env.get("CLUSTER_NAME") or None,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
    )


class RepairLoop(threading.Thread):
    """Repairs every queue while this instance holds the repair lease."""

    def __init__(self, service, interval: float):
        super().__init__(name="cassieq-repair", daemon=True)
        self.service = service
        self.interval = interval
        self.ttl = max(30, int(interval * 4))
        self.stopped = threading.Event()
        self.passes = 0
        self.held = False
        self.client: Any = None  # its own client, made on its thread: never one of the pool's

    def hold(self) -> bool:
        """Take or renew the lease; logs each change of hands as seen from here."""
        held = self._take()
        if held != self.held:
            log.warning(
                "repair lease %s by instance %s",
                "taken" if held else "lost (another instance holds it)",
                self.service.instance,
            )
            self.held = held
            self.service.metrics.repair_lease_held.set(1 if held else 0)
        return held

    def _take(self) -> bool:
        conn, me = self.service.conn, self.service.instance
        res = conn.cas(
            "UPDATE {ks}.service_leases USING TTL ? SET owner = ? WHERE name = ? IF owner = ?",
            (self.ttl, me, LEASE_NAME, me),
            read="SELECT owner FROM {ks}.service_leases WHERE name = ?",
            read_params=(LEASE_NAME,),
            applied=lambda row: row is not None and row.owner == me,
        )
        if res.was_applied:
            return True
        res = conn.cas(
            "INSERT INTO {ks}.service_leases (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?",
            (LEASE_NAME, me, self.ttl),
            read="SELECT owner FROM {ks}.service_leases WHERE name = ?",
            read_params=(LEASE_NAME,),
            applied=lambda row: row is not None and row.owner == me,
        )
        return bool(res.was_applied)

    def release(self) -> None:
        try:
            self.service.conn.execute(
                "DELETE FROM {ks}.service_leases WHERE name = ? IF owner = ?",
                (LEASE_NAME, self.service.instance),
            )
        except Exception as exc:  # the TTL ends it anyway
            log.info("repair lease not released (%s); it expires by itself", exc)

    def one_pass(self) -> None:
        def repair_all(c) -> bool:
            for info in c.list_queues():
                if self.stopped.is_set() or not self.hold():
                    return False
                try:
                    c.repair(info.name)
                except QueueNotFoundError:
                    continue
            return True

        if repair_all(self.client):
            self.passes += 1
            self.service.metrics.repair_passes.inc()

    def run(self) -> None:
        from ..client import QueueClient

        self.client = QueueClient(self.service.connection_config, self.service.conn)
        while not self.stopped.wait(self.interval):
            try:
                if self.hold():
                    self.one_pass()
            except Exception:
                log.exception("repair pass failed; the next one is in %.0f s", self.interval)
        if self.held:
            self.release()


def bounded_h11(header_timeout: float) -> type:
    """uvicorn's h11 protocol with a deadline on each request's headers: a connection that has
    not sent a whole request head ``header_timeout`` seconds after it opened (or after its last
    response) is closed, however slowly it trickles bytes. uvicorn's own keep-alive timer is
    reset by every byte, so alone it does not bound a slow sender."""
    import asyncio

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.head_deadline: asyncio.TimerHandle | None = None
            self.arm_head_deadline()

        def arm_head_deadline(self) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
            self.head_deadline = self.loop.call_later(header_timeout, self.head_too_late)

        def head_too_late(self) -> None:
            # Still waiting for the head of a request (h11's IDLE): close the connection. A
            # request being read or answered is left alone.
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self.arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
            super().connection_lost(exc)

    return BoundedH11


def draining_server_class() -> type:
    import uvicorn

    class Draining(uvicorn.Server):
        """uvicorn's server that marks the service draining at the first SIGTERM or SIGINT, so
        ``/ready`` answers 503 from then on; with a drain notice it keeps accepting for that
        long first (a load balancer sees the 503 and stops sending), then drains as uvicorn
        does."""

        def __init__(self, config, service, notice: float) -> None:
            super().__init__(config)
            self.service = service
            self.notice = notice
            self.noticed: threading.Timer | None = None

        def handle_exit(self, sig, frame) -> None:
            first = not self.service.draining
            self.service.draining = True
            if first and self.notice > 0:
                log.warning("draining: /ready answers 503; closing in %.1f s", self.notice)
                self.noticed = threading.Timer(self.notice, self.end_notice, (sig,))
                self.noticed.daemon = True
                self.noticed.start()
                return
            super().handle_exit(sig, frame)

        def end_notice(self, sig: int) -> None:
            uvicorn.Server.handle_exit(self, sig, None)

    return Draining


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import build_app
    from .state import Service

    # uvicorn's own lines (listening, shutting down, finished) beside the access log
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)
    config = service_config(args)
    opts = options_from_flags(args)
    opts.update(original_env_options(opts))
    connection = connection_from_options(opts)
    service = Service(config, connection)
    if args.bootstrap:
        from ..client import QueueClient

        QueueClient(connection, service.conn).bootstrap(create_keyspace=args.create_keyspace)
    loop = RepairLoop(service, config.repair_interval) if config.repair else None
    if loop is not None:
        loop.start()
    server = draining_server_class()(
        uvicorn.Config(
            build_app(service),
            host=config.host,
            port=config.http_port,
            http=bounded_h11(config.header_timeout),
            lifespan="on",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=math.ceil(config.drain_seconds),
            h11_max_incomplete_event_size=H11_MAX_EVENT_BYTES,
            ssl_certfile=config.tls_cert_file,
            ssl_keyfile=config.tls_key_file,
        ),
        service,
        config.drain_notice,
    )
    log.warning(
        "cassieq serve: instance %s on %s:%d, keyspace %s%s",
        service.instance,
        config.host,
        config.http_port,
        connection.keyspace,
        ", repairing" if loop else "",
    )
    try:
        server.run()
    finally:
        if loop is not None:
            loop.stopped.set()
            loop.join(timeout=10)
        service.close()
    return 0
