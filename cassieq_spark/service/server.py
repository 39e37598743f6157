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
import os
import threading
from collections.abc import Mapping

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
    s.add_argument(
        "--signed-url-max-seconds",
        type=float,
        default=None,
        help="longest lifetime of a signed URL, from its use to its end time (7 days)",
    )
    s.add_argument("--clock-skew", type=float, default=None, help="signed requests' skew, s (60)")
    s.add_argument("--max-body-bytes", type=int, default=None, help="largest request body")
    s.add_argument("--repair", action="store_true", help="run repair here (one instance at a time)")
    s.add_argument("--repair-interval", type=float, default=None, help="seconds between passes (5)")
    s.add_argument("--drain-seconds", type=float, default=None, help="SIGTERM drain limit (30)")
    s.add_argument("--workers", type=int, default=None, help="engine calls at once (32)")
    s.add_argument("--bootstrap", action="store_true", help="create or migrate the schema first")
    s.add_argument("--create-keyspace", action="store_true", help="with --bootstrap")
    s.add_argument("--tls-cert-file", metavar="PEM", help="serve HTTPS with this certificate")
    s.add_argument("--tls-key-file", metavar="PEM", help="and this key")


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
    url_max = _number(
        getattr(args, "signed_url_max_seconds", None),
        "CASSIEQ_SIGNED_URL_MAX_SECONDS",
        env,
        cfg.DEFAULT_SIGNED_URL_MAX_SECONDS,
    )
    if not 60 <= url_max <= 366 * 24 * 3600:
        raise ConfigError(
            f"--signed-url-max-seconds must be from 60 to 31622400 (366 days), got {url_max:g}"
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
        signed_url_max_seconds=url_max,
        skew_seconds=_number(args.clock_skew, "CASSIEQ_CLOCK_SKEW", env, cfg.DEFAULT_SKEW_SECONDS),
        max_body_bytes=int(
            _number(args.max_body_bytes, "CASSIEQ_MAX_BODY_BYTES", env, cfg.DEFAULT_MAX_BODY_BYTES)
        ),
        repair=bool(args.repair),
        repair_interval=_number(
            args.repair_interval, "CASSIEQ_REPAIR_INTERVAL", env, cfg.DEFAULT_REPAIR_INTERVAL
        ),
        drain_seconds=_number(
            args.drain_seconds, "CASSIEQ_DRAIN_SECONDS", env, cfg.DEFAULT_DRAIN_SECONDS
        ),
        workers=int(_number(args.workers, "CASSIEQ_WORKERS", env, cfg.DEFAULT_WORKERS)),
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

        if self.service.with_client(repair_all):
            self.passes += 1
            self.service.metrics.repair_passes.inc()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                if self.hold():
                    self.one_pass()
            except Exception:
                log.exception("repair pass failed; the next one is in %.0f s", self.interval)
        if self.held:
            self.release()


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
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(service),
            host=config.host,
            port=config.http_port,
            http="h11",
            lifespan="on",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=int(config.drain_seconds),
            h11_max_incomplete_event_size=H11_MAX_EVENT_BYTES,
            ssl_certfile=config.tls_cert_file,
            ssl_keyfile=config.tls_key_file,
        )
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
