"""Which Cassandra to use on a port: one already there, this launcher's own, or a new one.

``make demo``, ``make cassandra-up`` and the test harness ask for a Cassandra on a port (9042 by
default). What listens there decides:

- this launcher's node for that port runs (perhaps on another port, see below): use it;
- a Cassandra 5.x answers CQL there that this launcher did not start (a developer's own, another
  checkout's): use it and leave it running;
- something else holds the port (not Cassandra, another major version, or a node that refuses
  us): start the embedded node on the next free port and record the port that was asked for, so
  the next request for it finds this node;
- nothing: start the embedded node there.

A node of this launcher recorded for the port but not running (its JVM was killed, the machine
restarted) is started again on the port it was asked for, with its data: the port a client was
configured for. A killed JVM's sockets are released a moment after it dies (about a second
measured), so the launcher first waits up to ``RELEASE_WAIT`` seconds for them; a port still
held then by something other than a Cassandra 5.x is a one-line failure naming the process
that holds it, not a move (unless the node had been moved before: it goes back to the port it
had).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import LocalCassandra, NodeReady, recorded_nodes
from .config import (
    DEFAULT_BASE_DIR,
    DEFAULT_PORT,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STORAGE_PORT,
    CassandraError,
    NodeConfig,
    node_address,
)
from .probe import (
    free_port,
    listener,
    port_free,
    port_open,
    query_release_version,
    wait_until_free,
)
from .process import live_pid
from .security import check_tls_mode

log = logging.getLogger(__name__)

SUPPORTED_MAJOR = "5"
# Seconds to wait for the ports of a recorded node that is not running to be released.
RELEASE_WAIT = 10.0


@dataclass
class Endpoint:
    """A Cassandra to connect to, and the launcher that runs it (None: one we did not start)."""

    contact_points: list[str]
    port: int
    message: str
    launcher: LocalCassandra | None = None
    release_version: str | None = None
    ready: list[NodeReady] = field(default_factory=list)

    @property
    def external(self) -> bool:
        return self.launcher is None

    @property
    def started(self) -> bool:
        """True if this request started a node (stopped again by ``stop_started``)."""
        return self.launcher is not None and bool(self.launcher.started_here)

    def stop_started(self) -> None:
        """Stop the nodes this request started; an existing Cassandra is left running."""
        if self.launcher is not None:
            self.launcher.stop_started_here()


def _own_running(
    base_dir: Path,
    port: int,
    nodes: int,
    heap: str | None,
    timeout: float,
    durable: bool,
    auth: bool,
    tls: str | None,
) -> LocalCassandra | None:
    """This launcher's cluster under ``base_dir`` if its first node runs for ``port``."""
    recorded = {node.index: node for node in recorded_nodes(base_dir)}
    first = recorded.get(1)
    if first is None or live_pid(first) is None or port not in (first.port, first.requested_port):
        return None
    if durable and not first.durable:
        # A running node is used as it is (stopping it would lose what it holds); the user is
        # told what the fast mode means and how to get a durable one.
        log.warning(
            "the embedded node under %s runs for port %s in fast mode: a crash of it loses "
            "acknowledged writes; `make cassandra-down` then `make cassandra-up` restarts it durable",
            base_dir,
            port,
        )
    if (auth, tls) != (first.auth, first.tls):
        raise CassandraError(
            f"the embedded node under {base_dir} runs for port {port} with auth={first.auth}, "
            f"tls={first.tls}, not auth={auth}, tls={tls}: stop it first (`make cassandra-down`), "
            "or use another port and --base-dir for a secured node beside it"
        )
    return LocalCassandra(
        nodes=max(nodes, first.nodes),
        port=first.port,
        storage_port=first.storage_port,
        heap=heap,
        base_dir=base_dir,
        cluster_name=first.cluster_name,
        startup_timeout=timeout,
        requested_port=first.requested_port,
        durable=first.durable,
        auth=first.auth,
        tls=first.tls,
    )


def _recorded_not_running(base_dir: Path, port: int) -> NodeConfig | None:
    """This launcher's first node under ``base_dir`` recorded for ``port``, if it is not running."""
    first = next((node for node in recorded_nodes(base_dir) if node.index == 1), None)
    if first is None or port not in (first.port, first.requested_port):
        return None
    return first if live_pid(first) is None else None


def _describe_holder(address: str, port: int) -> tuple[str, str | None]:
    """What listens on address:port, in a few words, and its Cassandra release if it has one."""
    version = query_release_version(address, port)
    if version is None:
        return "something that does not answer CQL", None
    return f"Cassandra {version}", version


def ensure_cassandra(
    port: int = DEFAULT_PORT,
    storage_port: int = DEFAULT_STORAGE_PORT,
    nodes: int = 1,
    heap: str | None = None,
    base_dir: Path | str | None = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    say: Callable[[str], None] = log.info,
    durable: bool = True,
    auth: bool = False,
    tls: bool | str | None = None,
) -> Endpoint:
    """A Cassandra 5.x answering for ``port``: found or started (see the module docstring).

    ``say`` receives one line before a start (which can take a minute) and what was decided.
    ``durable`` (the default) starts nodes that survive a SIGKILL with what they acknowledged;
    False starts the fast test node (no commitlog sync). An external Cassandra is used as it is.
    Raises CassandraError (one line) when none can be found or started.
    """
    base = Path(base_dir).resolve() if base_dir else DEFAULT_BASE_DIR
    addresses = [node_address(i) for i in range(1, nodes + 1)]
    tls_mode = check_tls_mode(tls)
    own = _own_running(base, port, nodes, heap, startup_timeout, durable, auth, tls_mode)
    if own is not None:
        ready = own.start()  # waits for CQL; starts any node of the ring that is down
        moved = f" (for port {port}, which is taken)" if own.port != port else ""
        message = (
            f"using the embedded Cassandra already running on {addresses[0]}:{own.port}{moved}"
        )
        say(message)
        return Endpoint(own.contact_points, own.port, message, own, ready=ready)

    native, why = port, ""
    stopped = _recorded_not_running(base, port)
    probed: tuple[str, str | None] | None = None  # what holds the port, when already asked
    if stopped is not None:
        # If its JVM was just killed, its ports are released a moment later; its storage port
        # is kept when free (the caller's is the default, which another node may hold).
        if port_open(addresses[0], port):
            probed = _describe_holder(addresses[0], port)
            if probed[1] is None and wait_until_free(addresses, port, RELEASE_WAIT):
                probed = None
        if wait_until_free(addresses, stopped.storage_port, 1.0):
            storage_port = stopped.storage_port
    if port_open(addresses[0], port):
        holder, version = probed or _describe_holder(addresses[0], port)
        if nodes == 1 and version is not None and version.split(".")[0] == SUPPORTED_MAJOR:
            message = (
                f"using the Cassandra {version} already answering on {addresses[0]}:{port} "
                "(not started by this launcher; left running)"
            )
            say(message)
            return Endpoint([addresses[0]], port, message, release_version=version)
        if version is not None and nodes == 1:
            holder += f", not {SUPPORTED_MAJOR}.x"
        if stopped is None:
            native = free_port(addresses, above=port, avoid={storage_port})
        elif stopped.port != port and all(port_free(a, stopped.port) for a in addresses):
            native = stopped.port  # moved before, for the same reason: back where it was
        else:
            process = listener(addresses[0], port)
            raise CassandraError(
                f"{addresses[0]}:{port} is held by {process or holder}, not by the embedded "
                f"node recorded for it under {base} (not running): stop that process, or ask "
                "for another port (CASSANDRA_PORT=..., --port)"
            )
        why = f"{addresses[0]}:{port} is taken by {holder}; "
    if not all(port_free(a, storage_port) for a in addresses):
        storage_port = free_port(addresses, above=storage_port, avoid={native})
        why += f"storage port taken, using {storage_port}; "
    say(f"{why}starting the embedded Cassandra 5.0 on {addresses[0]}:{native}...")
    launcher = LocalCassandra(
        nodes=nodes,
        port=native,
        storage_port=storage_port,
        heap=heap,
        base_dir=base,
        startup_timeout=startup_timeout,
        requested_port=port,
        durable=durable,
        auth=auth,
        tls=tls_mode,
    )
    started = time.monotonic()
    try:
        ready = launcher.start()
    except BaseException:
        launcher.stop_started_here()
        raise
    message = (
        f"{why}started the embedded Cassandra 5.0 on {addresses[0]}:{native} "
        f"in {time.monotonic() - started:.1f} s"
    )
    say(message)
    return Endpoint(launcher.contact_points, native, message, launcher, ready=ready)


@contextmanager
def cassandra_endpoint(
    port: int = DEFAULT_PORT,
    say: Callable[[str], None] = log.info,
    *,
    storage_port: int = DEFAULT_STORAGE_PORT,
    nodes: int = 1,
    base_dir: Path | str | None = None,
    durable: bool = True,
    auth: bool = False,
    tls: bool | str | None = None,
) -> Iterator[Endpoint]:
    """:func:`ensure_cassandra` as a context: on leaving, stops only the nodes it started."""
    endpoint = ensure_cassandra(
        port,
        storage_port=storage_port,
        nodes=nodes,
        base_dir=base_dir,
        say=say,
        durable=durable,
        auth=auth,
        tls=tls,
    )
    try:
        yield endpoint
    finally:
        endpoint.stop_started()


__all__ = ["CassandraError", "Endpoint", "cassandra_endpoint", "ensure_cassandra"]
