"""What a driver failure tells a user, and whether the request reached any node.

Kept apart from the connection itself: these decide wording and safety, not transport.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.connection import ConnectionBusy, ConnectionException
from cassandra.pool import NoConnectionsAvailable
from cassandra.protocol import OverloadedErrorMessage

from ...errors import CassandraUnavailableError
from . import suspend

log = logging.getLogger(__name__)

# A request that no node received is sent again after these pauses (seconds) before it fails.
# They add up to more than the driver's longest wait between two attempts to reach a node that
# went down (session.RECONNECT_MAX_DELAY, 2 s): a long-lived process (a reused Spark Python
# worker) whose only node came back must see it up again before it gives up. They stay short
# because callers that settle an unknown outcome retry on top of them: a cluster that is really
# gone must still fail a streaming query within a minute.
UNSENT_RETRY_DELAYS = (0.5, 1.0, 2.0, 2.0)

# What a TLS mismatch looks like from the client's side, and what the user should change.
_TLS_HINTS = (
    ("CERTIFICATE_VERIFY_FAILED", "the node's certificate is not signed by a CA in sslCaFile "
     "(or does not name this host): give the CA that signed it, or sslVerify=false to test"),
    ("WRONG_VERSION_NUMBER", "this port does not speak TLS: set ssl=false, or use the TLS port"),
    ("Connection reset by peer", "a node that requires TLS resets plaintext clients: set "
     "ssl=true and sslCaFile, or check contactPoints/port"),
)  # fmt: skip


def tls_hint(error: str, ssl_enabled: bool) -> str:
    for marker, hint in _TLS_HINTS:
        if marker in error and (ssl_enabled or marker == "Connection reset by peer"):
            return hint
    return (
        "check contactPoints/port and that the cluster is up (`make cassandra-up` for a local one)"
    )


def local_dc_down(hosts: Iterable[Any], local_dc: str | None) -> str | None:
    """What to do when no node of the connection's ``localDc`` can take a request, or None
    (no localDc given, one of its nodes is known up, or every other data center's nodes are
    known down as well).

    A connection with ``localDc`` sends its requests to that data center's nodes only (the
    driver ignores the others' nodes as coordinators), even when another data center's nodes
    could serve the queue's quorum: its requests then fail although the cluster as a whole
    answers. The way out is another localDc with nodes up, or to wait. ``hosts``: the
    driver's ``Host`` objects (``address``, ``datacenter``, ``is_up``).
    """
    if not local_dc:
        return None
    hosts = list(hosts)
    if any(h.is_up is True for h in hosts if h.datacenter == local_dc):
        return None  # its nodes are there: the request failed for another reason
    local = sorted(str(h.address) for h in hosts if h.datacenter == local_dc)
    # A node this connection never used (another data center's) may be up with its state
    # unknown to the driver (None): only one known to be down rules its data center out.
    others = sorted(
        {
            h.datacenter
            for h in hosts
            if h.datacenter not in (None, local_dc) and h.is_up is not False
        }
    )
    if not others:
        return None
    where = f" ({', '.join(local)})" if local else ""
    return (
        f"no node of data center {local_dc!r}{where} answers, and this connection uses only "
        f"its localDc's nodes: retry once one is back, or connect with localDc set to another "
        f"data center ({', '.join(others)})"
    )


def unavailable_error(
    cluster: Cluster, exc: NoHostAvailable, where: str | None = None, local_dc: str | None = None
) -> CassandraUnavailableError:
    """A driver NoHostAvailable from a running cluster connection, as the error a user can act
    on: which Cassandra, which nodes are down, and what to do (with ``local_dc``, the
    connection's localDc: when only that data center's nodes are gone, say so)."""
    if isinstance(exc, CassandraUnavailableError):
        return exc
    if where is None:
        where = f"{','.join(map(str, cluster.contact_points))}:{cluster.port}"
    hosts = list(cluster.metadata.all_hosts())
    down = sorted(h.address for h in hosts if h.is_up is False)
    state = f"nodes down: {', '.join(down)}; " if down else ""
    todo = local_dc_down(hosts, local_dc) or (
        "retry once the cluster is back, or restart the streaming query from its checkpoint"
    )
    return CassandraUnavailableError(
        f"Cassandra at {where} did not answer: no node could take the request "
        f"({state}{first_error(exc)}). Nothing acknowledged is lost: {todo}",
        exc.errors if isinstance(exc.errors, dict) else {},
        delivered=not never_sent(exc),
    )


# What the driver reports for a host it did not send the request to: the pool's connection was
# already dead, the host marked down, or no connection or stream was free.
_UNSENT = re.compile(
    r"^(Connection to \S+ is (defunct|closed)|Host has been marked down or removed|"
    r"Pool is shutdown|Pool for \S+ is shutdown)$"
)


def never_sent(exc: NoHostAvailable) -> bool:
    """True when no host received the request, so it cannot have applied."""
    errors = exc.errors if isinstance(exc.errors, dict) else None
    if errors is None:
        return False
    return all(
        isinstance(e, (NoConnectionsAvailable, ConnectionBusy))
        or (isinstance(e, ConnectionException) and bool(_UNSENT.match(str(e))))
        or is_shutdown_refusal(e)
        for e in errors.values()
    )


# Cassandra's native-protocol dispatcher answers every request that reaches a node whose
# transport is shutting down with Overloaded and this message, before it runs anything.
_SHUTTING_DOWN = "Server is shutting down"


def is_shutdown_refusal(err: object) -> bool:
    """An Overloaded a node sends while it shuts down (a drain, a restart, a whole-cluster
    stop). Cassandra refuses the request before running it, so, unlike the Overloaded a
    compare-and-set can get while it commits, it proves nothing applied: any statement may be
    sent again."""
    return isinstance(err, OverloadedErrorMessage) and _SHUTTING_DOWN in str(
        getattr(err, "message", "") or err
    )


def unsent_after_refusal(err: OverloadedErrorMessage) -> NoHostAvailable:
    """The refusal of a node shutting down, once the retry policy has tried the other nodes,
    as the NoHostAvailable of a request no node ran: sent again while the nodes come back, then
    the :class:`CassandraUnavailableError` a user can act on (``resend_unsent``)."""
    return NoHostAvailable("every node tried is shutting down", {"a node shutting down": err})


def first_error(exc: NoHostAvailable) -> str:
    errors = exc.errors if isinstance(exc.errors, dict) else {}
    for host, err in errors.items():
        return f"{host}: {err}"
    return str(exc)


def resend_unsent(
    send: Callable[[], Any],
    exc: NoHostAvailable,
    unavailable: Callable[[NoHostAvailable], CassandraUnavailableError],
) -> Any:
    """After a NoHostAvailable: if no node received the request (every connection it tried was
    already known dead, which is what a long-lived process finds when its nodes come back), send
    it again while the driver reconnects; it cannot have applied, so this is safe for any
    statement. Otherwise, or if the nodes stay away, raise ``unavailable(exc)``."""
    for delay in UNSENT_RETRY_DELAYS:
        if not never_sent(exc):
            break
        log.info("no node took the request (%s); sending it again in %.1f s", exc, delay)
        suspend.pause(delay)
        try:
            return send()
        except NoHostAvailable as again:
            exc = again
        except OverloadedErrorMessage as again:
            if not is_shutdown_refusal(again):
                raise
            exc = unsent_after_refusal(again)
    raise unavailable(exc) from exc
