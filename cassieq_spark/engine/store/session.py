"""Cassandra sessions and prepared statements, reused per process.

Spark reuses its Python workers across tasks and micro-batches, so a per-process cache keyed by
the connection settings saves a connect (hundreds of ms) per task.
"""

from __future__ import annotations

import atexit
import io
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from cassandra import (
    AuthenticationFailed,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    Session,
    UnresolvableContactPoints,
)
from cassandra.connection import ConnectionException
from cassandra.policies import (
    ConstantSpeculativeExecutionPolicy,
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    TokenAwarePolicy,
)
from cassandra.protocol import BatchMessage, OverloadedErrorMessage
from cassandra.query import (
    BatchStatement,
    BatchType,
    BoundStatement,
    PreparedStatement,
    tuple_factory,
)

from ...config import ConnectionConfig, check_cluster
from ...errors import CassandraUnavailableError, ConfigError, ConnectionFailedError
from . import faults, suspend
from .failures import (
    first_error,
    is_shutdown_refusal,
    local_dc_down,
    resend_unsent,
    tls_hint,
    unavailable_error,
    unsent_after_refusal,
)
from .retries import QueueRetryPolicy, is_idempotent

log = logging.getLogger(__name__)


# The outcome of these is unknown to the client: the statement may or may not have applied.
UNKNOWN_OUTCOME = (WriteTimeout, OperationTimedOut, ConnectionException, NoHostAvailable)
# Refusals that a compare-and-set can also get after its proposal was accepted (see cas()).
REFUSED = (Unavailable, OverloadedErrorMessage)
EXEC_PROFILE_SERIAL = "serial"
SERIAL_READ_ATTEMPTS = 5
SERIAL_READ_BUDGET = 60.0  # seconds; a restarting replica can hold Paxos rounds up for tens
SPECULATIVE_DELAY = 5.0  # seconds; well under the 20 s request timeout, rare when all is well
# The driver's default waits up to 10 minutes between attempts to reach a node that went down,
# so a restarted single node (or a whole cluster back from an outage) would stay unused for
# minutes by a long-lived process such as a Spark worker: retry at most every 2 s instead (a
# refused connection costs the down node nothing; with 10 s, a CI run showed a query restarted
# after an outage fail again: its reused worker had not yet seen the node back).
RECONNECT_BASE_DELAY = 0.5
RECONNECT_MAX_DELAY = 2.0
# A node cut off by the network (not dead: its connections get no reset, only silence) holds
# every request sent to it until the request timeout, and the driver keeps choosing it: with
# the driver's defaults (a heartbeat every 30 s, 30 s to answer) a partitioned coordinator was
# used for up to a minute, and a put_many blocked 59 s. A connection that has received nothing
# for HEARTBEAT_INTERVAL is sent a heartbeat; one that does not answer it within
# HEARTBEAT_TIMEOUT is closed, its requests in flight fail over (idempotent ones to the next
# replica, compare-and-sets to their settle read) and the node is marked down until it
# answers again. A silent node is so left within 2 * HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT
# (16 s). The timeout stays well above a loaded node's reply time to a heartbeat (the
# transport thread answers it, not the request stages).
HEARTBEAT_INTERVAL = 4.0
HEARTBEAT_TIMEOUT = 8.0


class CasResult:
    """A compare-and-set's outcome, shaped like the driver's result (``was_applied``, ``one()``).

    ``resolved`` is True when the reply was lost and the outcome was read back at SERIAL.
    """

    def __init__(self, applied: bool, row: Any, resolved: bool = False):
        self.was_applied = applied
        self.row = row
        self.resolved = resolved

    def one(self) -> Any:
        return self.row


class _Translated:
    """A driver future whose ``result()`` raises :class:`CassandraUnavailableError` instead of
    the driver's bare ``NoHostAvailable`` (which names no cluster and says nothing to do)."""

    __slots__ = ("_future", "_conn", "_resend")

    def __init__(self, future, conn: Connection, resend: Callable[[], Any]):
        self._future = future
        self._conn = conn
        self._resend = resend

    def result(self):
        suspend.wait_future(self._future)
        try:
            return self._future.result()
        except (NoHostAvailable, OverloadedErrorMessage) as exc:
            return _send_again_if_unsent(self._conn, self._resend, exc)


class _Failed:
    """A future whose result is an exception (a fault injected into an async request), which
    is handled as the driver's would be."""

    def __init__(self, exc: Exception, conn: Connection, resend: Callable[[], Any]):
        self.exc = exc
        self._conn = conn
        self._resend = resend

    def result(self):
        return _send_again_if_unsent(self._conn, self._resend, self.exc)


def _send_again_if_unsent(conn: Connection, resend: Callable[[], Any], exc: Exception) -> Any:
    """After a request failed: send it again if no node ran it (no node took it, or every node
    tried refused it while shutting down), else raise what a user can act on."""
    if isinstance(exc, CassandraUnavailableError):
        raise exc  # already translated, and already sent again where that was safe
    if isinstance(exc, NoHostAvailable):
        return conn.resend_unsent(resend, exc)
    if is_shutdown_refusal(exc):
        return conn.resend_unsent(resend, unsent_after_refusal(exc))
    raise exc


def _text(statement) -> str:
    if isinstance(statement, str):
        return statement
    if isinstance(statement, BoundStatement):
        return statement.prepared_statement.query_string
    if isinstance(statement, BatchStatement):
        # A batch may name what it holds (``query_string``), for the fault seam and the logs.
        return getattr(statement, "query_string", None) or "BATCH"
    return getattr(statement, "query_string", "") or ""


def _was_applied(rs) -> bool:
    """``was_applied``, also for a conditional batch sent as CQL text (the driver knows only its
    own ``BatchStatement``): one that did not apply returns a row per row its conditions read,
    each led by ``[applied]``."""
    rows = rs.current_rows
    if len(rows) > 1:
        return bool(rows[0][0])
    return bool(rs.was_applied)


# -- batches encoded by the caller ------------------------------------------------------------


class EncodedStatements:
    """The statements of a batch, already in the native protocol's encoding: ``count``
    statements, each ``[byte 1][short id length][prepared id][short n][n values]`` (protocol v3
    and later), one after the other in ``body``. A writer of many rows of one prepared
    statement builds them in a few C-level calls per batch (``core/messages.py``) where the
    driver would encode every value of every row in turn; :func:`encoding_handler` sends them
    as they are. They cannot be iterated as ``(prepared, id, values)``, so a session without
    that handler fails on them rather than sending something else."""

    __slots__ = ("body", "count", "query")

    def __init__(self, count: int, body: bytes, query: str = ""):
        if not 0 < count <= 0xFFFF:
            raise ValueError(f"a batch holds 1 to 65535 statements, not {count}")
        self.count = count
        self.body = body
        self.query = query  # the prepared statement's text, for logs and counts

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        raise TypeError(
            "an encoded batch is sent only through a session with cassieq's encoding handler "
            "(Connection.encodes_batches)"
        )


class EncodedBatch(BatchStatement):
    """An unlogged batch of :class:`EncodedStatements`, routed by ``routing_key`` (the
    partition's key as the driver builds it, ``BoundStatement.routing_key``) in ``keyspace``."""

    def __init__(self, statements: EncodedStatements, routing_key: bytes, keyspace: str | None):
        super().__init__(batch_type=BatchType.UNLOGGED)
        self._statements_and_parameters = statements
        self.routing_key = routing_key
        self.keyspace = keyspace


_SHORT = struct.Struct(">H")


class _EncodedBatchMessage(BatchMessage):
    """A BATCH whose statements are :class:`EncodedStatements`: the driver's own encoding of
    everything around them (type, consistency, flags, timestamp, keyspace), the statements'
    bytes as they are."""

    def send_body(self, f, protocol_version):
        rest = io.BytesIO()
        BatchMessage(
            self.batch_type,
            (),
            self.consistency_level,
            self.serial_consistency_level,
            self.timestamp,
            self.keyspace,
        ).send_body(rest, protocol_version)
        around = rest.getvalue()  # [type][short 0][consistency, flags, ...]
        f.write(around[:1])
        f.write(_SHORT.pack(self.queries.count))
        f.write(self.queries.body)
        f.write(around[3:])


def encoding_handler(base: type) -> type:
    """The protocol handler ``base`` (a session's ``client_protocol_handler``), also sending
    batches of :class:`EncodedStatements`; every other message is encoded by ``base``."""

    class EncodingHandler(base):
        @classmethod
        def encode_message(
            cls, msg, stream_id, protocol_version, compressor, allow_beta_protocol_version
        ):
            if isinstance(msg, BatchMessage) and isinstance(msg.queries, EncodedStatements):
                encoded = _EncodedBatchMessage(
                    msg.batch_type,
                    msg.queries,
                    msg.consistency_level,
                    msg.serial_consistency_level,
                    msg.timestamp,
                    msg.keyspace,
                )
                encoded.custom_payload = msg.custom_payload
                encoded.tracing = msg.tracing
                msg = encoded
            return super().encode_message(
                msg, stream_id, protocol_version, compressor, allow_beta_protocol_version
            )

    EncodingHandler.__name__ = f"Encoding{base.__name__}"
    return EncodingHandler


class Connection:
    """One cluster connection: a driver ``Session`` plus a prepared-statement cache.

    Every statement goes through :meth:`execute`, :meth:`execute_async` or :meth:`cas`, the
    seam where tests inject lost replies and retries (``engine/store/faults.py``).
    """

    # True when its session sends EncodedBatch (its own session, see encoding_handler).
    encodes_batches: bool = False

    def __init__(
        self,
        config: ConnectionConfig,
        session: Session | None = None,
        profile: str | None = None,
    ):
        self.config = config
        self._prepared: dict[str, PreparedStatement] = {}
        self._lock = threading.Lock()
        self._refs = 0
        # The execution profiles of plain statements and serial reads: names of this
        # connection's own cluster's profiles, or profile objects derived from a user's.
        self.profile: str | ExecutionProfile = EXEC_PROFILE_DEFAULT
        self.serial_profile: str | ExecutionProfile = EXEC_PROFILE_SERIAL
        self._tuple_profile: ExecutionProfile | None = None
        if session is not None:
            self._adopt(session, profile)
            return
        if profile is not None:
            raise ValueError("an execution profile name goes with a session of your own")
        # Token-aware over DC-aware: requests go to a replica of their partition in the
        # local data center (the first one contacted when localDc is not given).
        balancing = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=config.local_dc))
        retry = QueueRetryPolicy()
        # A replica frozen by a long GC pause (or stopping) holds a request until the client
        # times out, and the driver does not retry client timeouts. Idempotent statements are
        # sent to a second replica when the first has not answered within this delay.
        speculative = ConstantSpeculativeExecutionPolicy(SPECULATIVE_DELAY, 2)
        profile = ExecutionProfile(
            load_balancing_policy=balancing,
            retry_policy=retry,
            speculative_execution_policy=speculative,
            consistency_level=config.consistency_level,
            serial_consistency_level=config.serial_consistency_level,
            request_timeout=config.request_timeout,
        )
        # Reads that settle a compare-and-set whose reply was lost (and finish its round).
        serial = ExecutionProfile(
            load_balancing_policy=balancing,
            retry_policy=retry,
            speculative_execution_policy=speculative,
            consistency_level=config.serial_consistency_level,
            request_timeout=config.request_timeout,
        )
        self.owns_cluster = True
        try:
            self.cluster = Cluster(
                **config.cluster_arguments(),
                execution_profiles={EXEC_PROFILE_DEFAULT: profile, EXEC_PROFILE_SERIAL: serial},
                connect_timeout=config.connect_timeout,
                reconnection_policy=ExponentialReconnectionPolicy(
                    RECONNECT_BASE_DELAY, RECONNECT_MAX_DELAY
                ),
                idle_heartbeat_interval=HEARTBEAT_INTERVAL,
                idle_heartbeat_timeout=HEARTBEAT_TIMEOUT,
                # v4 avoids v5's per-frame checksums, partly computed in pure Python.
                protocol_version=4,
            )
        except UnresolvableContactPoints:
            raise ConnectionFailedError(
                f"cannot resolve any of the contactPoints {', '.join(config.contact_points)} "
                "(DNS lookup failed); check the host names, or give IP addresses"
            ) from None
        try:
            self.session: Session = self.cluster.connect()
        except AuthenticationFailed as exc:
            self.cluster.shutdown()
            raise ConnectionFailedError(
                f"Cassandra at {config.describe()} rejected the credentials; check username/password"
            ) from exc
        except NoHostAvailable as exc:
            hosts = list(self.cluster.metadata.all_hosts())
            dcs = sorted({h.datacenter for h in hosts if h.datacenter})
            self.cluster.shutdown()
            errors = exc.errors if isinstance(exc.errors, dict) else {}
            if config.local_dc and dcs and config.local_dc not in dcs:
                # The driver then reports its contact points as a list, naming nothing.
                raise ConnectionFailedError(
                    f"localDc {config.local_dc!r} is not a data center of the cluster at "
                    f"{config.describe()}; its data centers: {', '.join(dcs)}"
                ) from exc
            if any(isinstance(e, AuthenticationFailed) for e in errors.values()):
                raise ConnectionFailedError(
                    f"Cassandra at {config.describe()} rejected the credentials; check username/password"
                ) from exc
            first = first_error(exc)
            # Connecting with localDc opens connections to that data center's nodes only.
            todo = local_dc_down(hosts, config.local_dc) or tls_hint(first, config.ssl_enabled)
            raise ConnectionFailedError(
                f"cannot reach Cassandra at {config.describe()}: {first}; {todo}"
            ) from exc
        except Exception as exc:  # driver raises OSError and friends for bad hosts
            self.cluster.shutdown()
            raise ConnectionFailedError(
                f"cannot reach Cassandra at {config.describe()}: {exc}; check contactPoints/port"
            ) from exc
        self.keyspace = config.keyspace
        # Writers of many rows hand batches over encoded (EncodedBatch); only this
        # connection's own session sends them.
        self.session.client_protocol_handler = encoding_handler(
            self.session.client_protocol_handler
        )
        self.encodes_batches = True
        try:
            check_cluster(config, self.cluster.metadata)  # LOCAL_* levels across data centers
        except Exception:
            self.cluster.shutdown()
            raise

    def _adopt(self, session: Session, profile: str | None) -> None:
        """Use a session the caller made and owns (never shut down here). Statements run with
        a copy of its profile ``profile`` (default: its default profile) that keeps its load
        balancing and timeouts but takes this connection's consistency levels and retry policy:
        the queue's guarantees need quorum reads and writes and idempotence-aware retries."""
        if not isinstance(session, Session):
            raise ConfigError(
                f"session must be a cassandra.cluster.Session, got {type(session).__name__}"
            )
        if session.is_shutdown:
            raise ConfigError("the session given is shut down: give a connected session")
        self.owns_cluster = False
        self.encodes_batches = False  # a caller's session keeps its protocol handler
        self.cluster = session.cluster
        self.session = session
        self.keyspace = self.config.keyspace
        name = EXEC_PROFILE_DEFAULT if profile is None else profile
        profiles = self.cluster.profile_manager.profiles
        if name not in profiles:
            known = ", ".join(repr(p) for p in profiles if isinstance(p, str)) or "none by name"
            raise ConfigError(
                f"execution profile {profile!r} is not one of the session's cluster (its "
                f"profiles: {known}); give one of them, or none for its default"
            )
        base = profiles[name]
        retry = QueueRetryPolicy()
        try:
            self.profile = session.execution_profile_clone_update(
                base,
                consistency_level=self.config.consistency_level,
                serial_consistency_level=self.config.serial_consistency_level,
                retry_policy=retry,
            )
            self.serial_profile = session.execution_profile_clone_update(
                base,
                consistency_level=self.config.serial_consistency_level,
                serial_consistency_level=None,
                retry_policy=retry,
            )
        except ValueError as exc:  # a cluster made with legacy parameters has no profiles
            raise ConfigError(
                f"the session's cluster cannot use execution profiles ({exc}); make it with "
                "execution_profiles= rather than default_retry_policy/load_balancing_policy"
            ) from None
        check_cluster(self.config, self.cluster.metadata)

    @property
    def tuple_profile(self) -> ExecutionProfile:
        """The profile of plain statements with rows as plain tuples, the columns in the order
        selected: for reads that turn whole pages into columns (``engine/stream/columns.py``),
        which need no named tuple per row. Same consistency, retries and timeouts."""
        if self._tuple_profile is None:
            self._tuple_profile = self.session.execution_profile_clone_update(
                self.profile, row_factory=tuple_factory
            )
        return self._tuple_profile

    def prepare(self, cql: str) -> PreparedStatement:
        """Prepare once per connection; ``{ks}`` in the text is the keyspace."""
        stmt = self._prepared.get(cql)
        if stmt is None and suspend.current() is not None:
            # Under an asynchronous runner: the driver has no asynchronous prepare, so it runs
            # on a worker thread (once per statement and connection), outside the lock, which
            # no suspended operation may hold.
            stmt = suspend.call_blocking(lambda: self._prepare_now(cql))
            return self._prepared.setdefault(cql, stmt)
        if stmt is None:
            with self._lock:
                stmt = self._prepared.get(cql)
                if stmt is None:
                    stmt = self._prepare_now(cql)
                    self._prepared[cql] = stmt
        return stmt

    def _prepare_now(self, cql: str) -> PreparedStatement:
        text = cql.replace("{ks}", self.keyspace)
        try:
            stmt = self.session.prepare(text)
        except NoHostAvailable as exc:  # preparing changes nothing: safe to resend
            stmt = self.resend_unsent(lambda: self.session.prepare(text), exc)
        stmt.is_idempotent = is_idempotent(cql)
        return stmt

    def _statement(self, statement):
        return self.prepare(statement) if isinstance(statement, str) else statement

    def _disturb(self, statement, stmt, params, kw) -> Exception | None:
        """Apply the fault a test injected into this execution (faults.py), if any: run the
        statement where the fault says it ran, and return the error its caller gets instead of
        the result (None: the caller runs it as usual, once more for ``retried``)."""
        rule = faults.taken(_text(statement))
        mode = None if rule is None else rule.mode
        if mode in (faults.RETRIED, faults.LOST_REPLY, faults.UNAVAILABLE_AFTER):
            self.session.execute(stmt, params or None, **kw)
        if rule is not None and rule.wait and mode != faults.RETRIED:
            suspend.pause(rule.wait)  # the error comes as late as the driver's timeout would
        if mode in (faults.TIMEOUT_BEFORE, faults.LOST_REPLY):
            return faults.injected_timeout(_text(statement))
        if mode == faults.REFUSED_BEFORE:
            return faults.injected_refusal(_text(statement))
        if mode == faults.UNAVAILABLE_AFTER:
            return faults.injected_unavailable(_text(statement))
        if mode == faults.FAILED_BEFORE:
            return faults.injected_write_failure(_text(statement))
        return None

    def execute(self, statement, params: tuple | list | None = (), **kw):
        """Run ``statement`` (CQL text with ``{ks}``, or a bound/batch statement)."""
        stmt = self._statement(statement)
        kw.setdefault("execution_profile", self.profile)
        # Every attempt passes the fault seam, the first and any sent again.
        send = lambda: self._send(statement, stmt, params, kw)  # noqa: E731
        try:
            if suspend.current() is not None:
                # Under an asynchronous runner: the same request on the driver's asynchronous
                # path, the operation suspended until its reply (its failures handled there).
                if (
                    faults.state.active
                    and (exc := self._disturb(statement, stmt, params, kw)) is not None
                ):
                    raise exc
                future = self.session.execute_async(stmt, params or None, **kw)
                return _Translated(future, self, send).result()
            return send()
        except (NoHostAvailable, OverloadedErrorMessage) as exc:
            return _send_again_if_unsent(self, send, exc)

    def _send(self, statement, stmt, params, kw):
        """One attempt of ``statement``, disturbed as a test's fault says, if one does."""
        if faults.state.active and (exc := self._disturb(statement, stmt, params, kw)) is not None:
            raise exc
        return self.session.execute(stmt, params or None, **kw)

    def execute_async(self, statement, params: tuple | list | None = (), **kw):
        stmt = self._statement(statement)
        kw.setdefault("execution_profile", self.profile)
        send = lambda: self._send(statement, stmt, params, kw)  # noqa: E731
        if faults.state.active and (exc := self._disturb(statement, stmt, params, kw)) is not None:
            return _Failed(exc, self, send)
        return _Translated(self.session.execute_async(stmt, params or None, **kw), self, send)

    def resend_unsent(self, send: Callable[[], Any], exc: NoHostAvailable) -> Any:
        """After a NoHostAvailable: if no node received the request (every connection it tried
        was already known dead, which is what a long-lived process finds when its nodes come
        back), send it again while the driver reconnects; it cannot have applied, so this is
        safe for any statement. Otherwise, or if the nodes stay away, raise the error a user
        can act on."""
        return resend_unsent(send, exc, self.unavailable)

    def unavailable(self, exc: NoHostAvailable) -> CassandraUnavailableError:
        """The driver's NoHostAvailable as the one error a user can act on."""
        return unavailable_error(self.cluster, exc, self.config.describe(), self.config.local_dc)

    def read_serial(self, cql: str, params: tuple | list = ()):
        """One row read at the serial level: completes any compare-and-set in progress on it,
        so what it returns is final. It follows an unknown outcome, and raising now would
        leave the caller not knowing whether its write applied: while the cluster answers but
        slowly (a frozen or restarting replica holds up the Paxos round this read must finish)
        it is retried for up to ``SERIAL_READ_BUDGET`` seconds; when no node or no quorum
        answers at all, after ``SERIAL_READ_ATTEMPTS`` quick tries."""
        deadline = time.monotonic() + SERIAL_READ_BUDGET
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                if faults.state.active and faults.take(cql) == faults.TIMEOUT_BEFORE:
                    raise faults.injected_timeout(cql)
                future = self.session.execute_async(
                    self.prepare(cql), params, execution_profile=self.serial_profile
                )
                suspend.wait_future(future)
                return future.result().one()
            except (ReadTimeout, WriteTimeout, Unavailable, *UNKNOWN_OUTCOME) as exc:
                if isinstance(exc, CassandraUnavailableError):
                    # No node took it, after the resends that wait for the driver to reconnect:
                    # more tries would only multiply that wait (a query must fail within a
                    # minute when its cluster is gone).
                    raise
                unreachable = isinstance(exc, (NoHostAvailable, Unavailable))
                if (unreachable and attempt >= SERIAL_READ_ATTEMPTS) or (
                    time.monotonic() + delay > deadline
                ):
                    if isinstance(exc, NoHostAvailable):
                        raise self.unavailable(exc) from exc
                    raise
                log.warning(
                    "serial read settling a compare-and-set failed (attempt %d: %s); "
                    "retrying in %.2f s",
                    attempt,
                    exc,
                    delay,
                )
                suspend.pause(delay)
                delay = min(delay * 2, 2.0)

    def cas(
        self,
        cql: str | BatchStatement,
        params: tuple | list,
        *,
        read: str,
        read_params: tuple | list,
        applied: Callable[[Any], bool],
    ) -> CasResult:
        """Run a compare-and-set and know its outcome even when the reply is lost.

        On a timeout or a broken connection the statement may have applied or not; ``read``
        (one row, read at SERIAL, which finishes any round in progress) and ``applied(row)``
        decide, as the driver documentation prescribes for CAS write timeouts. Unavailable and
        Overloaded are settled the same way: Cassandra raises both also after the proposal was
        accepted (while it commits), so neither proves that nothing applied. One that the
        read shows did not apply is sent once more, as the driver does for a plain statement
        (a restarting coordinator refuses requests with Overloaded).
        """
        refused = 0
        while True:
            try:
                rs = self.execute(cql, params)
            except (ReadTimeout, *REFUSED, *UNKNOWN_OUTCOME) as exc:
                if isinstance(exc, CassandraUnavailableError) and not exc.delivered:
                    raise  # no node received it: it did not apply, there is nothing to settle
                # ReadTimeout: the round timed out reading the current values (before or after
                # a proposal, the coordinator does not say); reading at SERIAL settles it.
                row = self.read_serial(read, read_params)
                ok = bool(applied(row))
                log.info(
                    "compare-and-set outcome unknown (%s); read back: %s",
                    type(exc).__name__,
                    "applied" if ok else "not applied",
                )
                if not ok and isinstance(exc, REFUSED) and refused == 0:
                    refused += 1
                    continue
                return CasResult(ok, row, resolved=True)
            return CasResult(_was_applied(rs), rs.one())

    def shutdown(self) -> None:
        """Close the cluster this connection made; a session the caller gave stays open."""
        if self.owns_cluster:
            self.cluster.shutdown()


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
