"""Cassandra sessions and prepared statements, reused per process.

Spark reuses its Python workers across tasks and micro-batches, so a per-process cache keyed by
the connection settings saves a connect (hundreds of ms) per task.
"""

from __future__ import annotations

import atexit
import logging
import threading

from cassandra import AuthenticationFailed
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    Session,
)
from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy, TokenAwarePolicy
from cassandra.query import PreparedStatement

from ..config import ConnectionConfig
from ..errors import ConnectionFailedError

log = logging.getLogger(__name__)


class Connection:
    """One cluster connection: a driver ``Session`` plus a prepared-statement cache."""

    def __init__(self, config: ConnectionConfig):
        self.config = config
        self._prepared: dict[str, PreparedStatement] = {}
        self._lock = threading.Lock()
        self._refs = 0
        base = (
            DCAwareRoundRobinPolicy(local_dc=config.local_dc)
            if config.local_dc
            else RoundRobinPolicy()
        )
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(base),
            consistency_level=config.consistency_level,
            serial_consistency_level=config.serial_consistency_level,
            request_timeout=config.request_timeout,
        )
        auth = (
            PlainTextAuthProvider(username=config.username, password=config.password)
            if config.username is not None
            else None
        )
        self.cluster = Cluster(
            contact_points=list(config.contact_points),
            port=config.port,
            auth_provider=auth,
            ssl_context=config.ssl_context(),
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connect_timeout=config.connect_timeout,
            # v4 avoids v5's per-frame checksums, partly computed in pure Python.
            protocol_version=4,
        )
        try:
            self.session: Session = self.cluster.connect()
        except AuthenticationFailed as exc:
            self.cluster.shutdown()
            raise ConnectionFailedError(
                f"Cassandra at {config.describe()} rejected the credentials; check username/password"
            ) from exc
        except NoHostAvailable as exc:
            self.cluster.shutdown()
            if any(isinstance(e, AuthenticationFailed) for e in exc.errors.values()):
                raise ConnectionFailedError(
                    f"Cassandra at {config.describe()} rejected the credentials; check username/password"
                ) from exc
            raise ConnectionFailedError(
                f"cannot reach Cassandra at {config.describe()}: {_first_error(exc)}; check "
                "contactPoints/port and that the cluster is up (`make cassandra-up` for a local one)"
            ) from exc
        except Exception as exc:  # driver raises OSError and friends for bad hosts
            self.cluster.shutdown()
            raise ConnectionFailedError(
                f"cannot reach Cassandra at {config.describe()}: {exc}; check contactPoints/port"
            ) from exc
        self.keyspace = config.keyspace

    def prepare(self, cql: str) -> PreparedStatement:
        """Prepare once per connection; ``{ks}`` in the text is the keyspace."""
        stmt = self._prepared.get(cql)
        if stmt is None:
            with self._lock:
                stmt = self._prepared.get(cql)
                if stmt is None:
                    stmt = self.session.prepare(cql.replace("{ks}", self.keyspace))
                    self._prepared[cql] = stmt
        return stmt

    def execute(self, cql: str, params: tuple | list = (), **kw):
        return self.session.execute(self.prepare(cql), params, **kw)

    def execute_async(self, cql: str, params: tuple | list = (), **kw):
        return self.session.execute_async(self.prepare(cql), params, **kw)

    def shutdown(self) -> None:
        self.cluster.shutdown()


def _first_error(exc: NoHostAvailable) -> str:
    for host, err in (exc.errors or {}).items():
        return f"{host}: {err}"
    return str(exc)


_cache: dict[tuple, Connection] = {}
_cache_lock = threading.Lock()


def shared_connection(config: ConnectionConfig) -> Connection:
    """A connection shared by everything in this process that uses the same settings."""
    key = config.cache_key()
    with _cache_lock:
        conn = _cache.get(key)
        if conn is None or conn.cluster.is_shutdown:
            log.debug("connecting to %s", config.describe())
            conn = Connection(config)
            _cache[key] = conn
        return conn


def drop_shared_connections() -> None:
    with _cache_lock:
        for conn in _cache.values():
            try:
                conn.shutdown()
            except Exception:  # shutting down at exit; nothing to do about it
                log.debug("error shutting down a connection", exc_info=True)
        _cache.clear()


atexit.register(drop_shared_connections)
