"""Is anything listening on a port, does it answer CQL, and which port is free: readiness checks.

Every check goes to the node itself (a real CQL query, not a log line), so "ready" means a client
would be served.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

# How far above a taken port to look for a free one before asking the OS for any.
PORT_SEARCH_SPAN = 100


def port_open(address: str, port: int, timeout: float = 1.0) -> bool:
    """True if something accepts TCP connections on address:port."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_free(address: str, port: int) -> bool:
    """True if a server could listen on address:port now.

    SO_REUSEADDR like the JVM's listeners, so a port whose last connections linger in TIME_WAIT
    counts as free (as it is to Cassandra) while one held by any listener does not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return not port_open(address, port, timeout=0.2)


def listener(address: str, port: int) -> str | None:
    """The process listening on address:port, as "NAME (pid N)", or None when none is seen
    (none listens, or the system does not show its sockets to this user)."""
    import psutil

    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if conn.laddr.ip not in (address, "0.0.0.0", "::", "::ffff:" + address):
            continue
        if conn.pid is None:
            return "a process this user cannot see"
        try:
            return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
        except psutil.Error:
            return f"pid {conn.pid}"
    return None


def wait_until_free(addresses: Iterable[str], port: int, timeout: float) -> bool:
    """True once a server could listen on ``port`` on every address, False after ``timeout``."""
    addresses = list(addresses)
    deadline = time.monotonic() + timeout
    while not all(port_free(a, port) for a in addresses):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def free_port(addresses: Iterable[str], above: int, avoid: Iterable[int] = ()) -> int:
    """A port free on every address: the first above ``above`` if one is near, else any."""
    addresses, avoid = list(addresses), set(avoid)
    for port in range(above + 1, min(above + PORT_SEARCH_SPAN, 65535) + 1):
        if port not in avoid and all(port_free(a, port) for a in addresses):
            return port
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((addresses[0], 0))
            port = int(sock.getsockname()[1])
        if port not in avoid and all(port_free(a, port) for a in addresses):
            return port
    raise OSError(f"no free port on {', '.join(addresses)}")


def query_node(
    address: str,
    port: int,
    cql: str,
    timeout: float = 5.0,
    connect: dict[str, Any] | None = None,
) -> list[Any] | None:
    """Rows of ``cql`` run on the node at address:port itself, or None if it does not answer.

    ``connect``: more arguments for the driver's Cluster (credentials, TLS) of a secured node.
    """
    if not port_open(address, port):
        return None
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([address]), request_timeout=timeout
    )
    cluster = Cluster(
        [address],
        port=port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        **(connect or {}),
    )
    try:
        return list(cluster.connect().execute(cql))
    except Exception as exc:  # any failure means "not answering (yet)"
        log.debug("%s:%s does not answer CQL: %s", address, port, exc)
        return None
    finally:
        cluster.shutdown()


def query_release_version(
    address: str, port: int, timeout: float = 5.0, connect: dict[str, Any] | None = None
) -> str | None:
    """``release_version`` of the node at address:port through CQL, or None if it does not answer."""
    rows = query_node(address, port, "SELECT release_version FROM system.local", timeout, connect)
    return rows[0].release_version if rows else None


def query_peers(
    address: str, port: int, timeout: float = 5.0, connect: dict[str, Any] | None = None
) -> set[str] | None:
    """Addresses in the ``system.peers`` table of the node at address:port, or None."""
    rows = query_node(address, port, "SELECT peer FROM system.peers", timeout, connect)
    return None if rows is None else {str(row.peer) for row in rows}
