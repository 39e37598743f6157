"""A local Cassandra node or cluster on 127.0.0.1..127.0.0.N, managed through pid files."""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from .config import (
    DEFAULT_BASE_DIR,
    DEFAULT_PORT,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STORAGE_PORT,
    STOP_TIMEOUT,
    CassandraError,
    JvmExtras,
    NodeConfig,
    data_center_layout,
    default_heap,
    node_address,
)
from .probe import port_open, query_release_version
from .process import (
    check_lib_dir,
    find_java,
    live_pid,
    read_record,
    read_rss_bytes,
    spawn,
    startup_failure,
    stop,
)
from .ring import start_joining, wait_ring
from .security import SUPERUSER, TlsFiles, check_tls_mode, ensure_tls_files

log = logging.getLogger(__name__)


@dataclass
class NodeReady:
    """Outcome of starting one node."""

    index: int
    address: str
    port: int
    pid: int
    seconds: float
    rss_bytes: int | None
    already_running: bool

    def describe(self) -> str:
        rss = f"{self.rss_bytes / 2**20:.0f} MiB" if self.rss_bytes else "unknown"
        if self.already_running:
            return f"node {self.index} {self.address}:{self.port} already running (pid {self.pid}, RSS {rss})"
        return (
            f"node {self.index} {self.address}:{self.port} ready in {self.seconds:.1f} s "
            f"(pid {self.pid}, RSS {rss})"
        )


class LocalCassandra:
    """A local Cassandra node or cluster on 127.0.0.1..127.0.0.N, managed through pid files.

    A context manager: entering starts what is not running, leaving stops only what it started.
    """

    def __init__(
        self,
        nodes: int = 1,
        port: int = DEFAULT_PORT,
        storage_port: int = DEFAULT_STORAGE_PORT,
        heap: str | None = None,
        base_dir: Path | str | None = None,
        cluster_name: str | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        requested_port: int | None = None,
        durable: bool = False,
        auth: bool = False,
        tls: bool | str | None = None,
        cgroups: Path | None = None,
        data_centers: Sequence[tuple[str, int]] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.nodes = nodes
        self._port = port
        self.storage_port = storage_port
        self.heap = heap or default_heap(nodes)
        self.base_dir = Path(base_dir).resolve() if base_dir else DEFAULT_BASE_DIR
        self.cluster_name = cluster_name or f"cassieq-{self.base_dir.name}"
        self.startup_timeout = startup_timeout
        self.requested_port = requested_port if requested_port != port else None
        self.durable = durable
        self.auth = auth
        self.tls = check_tls_mode(tls)
        # A cgroup v2 directory: node i starts in ``cgroups/node<i>`` (see process.spawn).
        self.cgroups = cgroups
        # (data center, nodes) pairs in node order, e.g. [("dc1", 2), ("dc2", 1)]: the nodes
        # then run GossipingPropertyFileSnitch, each with a rackdc file of its own. None: one
        # data center (SimpleSnitch), as every cluster the launcher starts by default.
        self.data_centers = data_center_layout(data_centers, nodes) if data_centers else {}
        # Extra environment of a node's next start (e.g. a faked clock), by node index.
        self.node_env: dict[int, dict[str, str]] = {}
        # Extra JVM properties and classpath of a node's next start (its data center, a clock
        # of its own), by node index.
        self.node_jvm: dict[int, JvmExtras] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._started_here: list[int] = []

    # --- description -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def contact_points(self) -> list[str]:
        return [node_address(i) for i in range(1, self.nodes + 1)]

    @property
    def started_here(self) -> list[int]:
        """Indexes of the nodes this object started and has not stopped."""
        return list(self._started_here)

    def node(self, index: int) -> NodeConfig:
        if not 1 <= index <= self.nodes:
            raise ValueError(f"node index must be in 1..{self.nodes}, got {index}")
        return NodeConfig(
            index,
            self.nodes,
            self._port,
            self.storage_port,
            self.base_dir,
            self.cluster_name,
            self.requested_port,
            self.durable,
            self.auth,
            self.tls,
            self.data_centers.get(index),
        )

    def node_cgroup(self, index: int) -> Path | None:
        """The cgroup v2 directory node ``index`` starts in, or None."""
        return None if self.cgroups is None else self.cgroups / f"node{index}"

    # --- security ------------------------------------------------------------------------------
    @property
    def tls_dir(self) -> Path:
        """Where ``ca.pem``, ``client.pem`` and ``client.key`` are (made at the first start)."""
        return self.node(1).tls_dir

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context that trusts this node's CA (with the client certificate if mutual)."""
        if self.tls is None:
            return None
        files = TlsFiles(self.tls_dir)
        ctx = ssl.create_default_context(cafile=str(files.ca))
        if self.tls == "mutual":
            ctx.load_cert_chain(str(files.client_cert), str(files.client_key))
        return ctx

    def probe_connect(self) -> dict[str, Any]:
        """Driver arguments the readiness checks need for this node's auth and TLS."""
        connect: dict[str, Any] = {}
        if self.auth:
            from cassandra.auth import PlainTextAuthProvider

            connect["auth_provider"] = PlainTextAuthProvider(*SUPERUSER)
        context = self.ssl_context()
        if context is not None:
            # Readiness asks "does this node answer", whatever names its certificate carries.
            context.check_hostname = False
            connect["ssl_context"] = context
        return connect

    def client_options(self) -> dict[str, str]:
        """Spark-style connection options for this node as the superuser (local use only)."""
        options = {"contactPoints": ",".join(self.contact_points), "port": str(self._port)}
        if self.auth:
            options.update(username=SUPERUSER[0], password=SUPERUSER[1])
        if self.tls is not None:
            files = TlsFiles(self.tls_dir)
            options.update(ssl="true", sslCaFile=str(files.ca))
            if self.tls == "mutual":
                options.update(sslCertFile=str(files.client_cert), sslKeyFile=str(files.client_key))
        return options

    # --- state -------------------------------------------------------------------------------
    def pid(self, index: int) -> int | None:
        """The recorded pid of node ``index`` if that process is alive and is this node's JVM."""
        return live_pid(self.node(index))

    def is_node_running(self, index: int) -> bool:
        return self.pid(index) is not None

    def is_node_answering(self, index: int) -> bool:
        node = self.node(index)
        return (
            self.pid(index) is not None
            and query_release_version(node.address, node.port, connect=self.probe_connect())
            is not None
        )

    def is_running(self) -> bool:
        """True when every node's process is alive and answers CQL."""
        return all(self.is_node_answering(i) for i in range(1, self.nodes + 1))

    # --- start / stop --------------------------------------------------------------------------
    def start(self) -> list[NodeReady]:
        """Start every node that is not running, one after another, and wait for CQL on each."""
        return [
            start_joining(
                partial(self.start_node, i), self.node(i), partial(self.is_node_running, i)
            )
            for i in range(1, self.nodes + 1)
        ]

    def start_node(self, index: int) -> NodeReady:
        node = self.node(index)
        started = time.monotonic()
        pid = self.pid(index)
        if pid is not None:
            recorded = read_record(node.node_dir)
            if recorded and (recorded.get("port"), recorded.get("storage_port")) != (
                node.port,
                node.storage_port,
            ):
                raise CassandraError(
                    f"node {index} under {self.base_dir} already runs on port "
                    f"{recorded.get('port')} (storage {recorded.get('storage_port')}), not "
                    f"{node.port}: use that port, or stop it first (`make cassandra-down`)"
                )
            self._wait_ready(node, started)
            return NodeReady(index, node.address, node.port, pid, 0.0, read_rss_bytes(pid), True)

        check_lib_dir()
        java = find_java()
        for port in (node.port, node.storage_port):
            if port_open(node.address, port):
                raise CassandraError(
                    f"{node.address}:{port} is in use by a process this launcher did not start: "
                    "stop it or choose other ports (--port, --storage-port)"
                )
        if node.tls is not None:
            ensure_tls_files(node.tls_dir)
        proc = spawn(
            node,
            java,
            self.heap,
            cgroup=self.node_cgroup(index),
            env=self.node_env.get(index),
            extras=self.node_jvm.get(index),
        )
        self._procs[index] = proc
        try:
            self._wait_ready(node, started)
        except CassandraError:
            self.stop_node(index)
            raise
        self._started_here.append(index)
        if self.nodes > 1:
            self.wait_ring(started + self.startup_timeout)
        seconds = time.monotonic() - started
        ready = NodeReady(
            index, node.address, node.port, proc.pid, seconds, read_rss_bytes(proc.pid), False
        )
        log.debug("%s", ready.describe())
        return ready

    def _wait_ready(self, node: NodeConfig, started: float) -> None:
        deadline = started + self.startup_timeout
        while True:
            proc = self._procs.get(node.index)
            exited = proc.poll() is not None if proc else live_pid(node) is None
            if exited:
                raise startup_failure(node, "the Cassandra process exited during startup")
            if query_release_version(node.address, node.port, connect=self.probe_connect()):
                return
            if time.monotonic() > deadline:
                raise startup_failure(node, f"no CQL answer within {self.startup_timeout:.0f} s")
            time.sleep(0.5)

    def wait_ring(self, deadline: float) -> None:
        """Wait until every running node lists every other running node in system.peers."""
        running = [
            self.node(i).address for i in range(1, self.nodes + 1) if self.is_node_running(i)
        ]
        wait_ring(running, self._port, deadline, self.probe_connect())

    def stop_node(self, index: int, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM the recorded process of node ``index``, SIGKILL after ``timeout``.

        Returns True if a process was stopped.
        """
        stopped = stop(self.node(index), timeout, self._procs.pop(index, None))
        if index in self._started_here:
            self._started_here.remove(index)
        return stopped

    def stop(self) -> None:
        """Stop every node of this cluster, last node first."""
        for index in range(self.nodes, 0, -1):
            self.stop_node(index)

    def wipe(self) -> None:
        """Delete all node directories (data, logs). Refuses while a node runs."""
        if any(self.is_node_running(i) for i in range(1, self.nodes + 1)):
            raise CassandraError(
                f"refusing to wipe {self.base_dir}: a node is running (stop it first)"
            )
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # --- context manager -----------------------------------------------------------------------
    def __enter__(self) -> LocalCassandra:
        try:
            self.start()
        except BaseException:
            self.stop_started_here()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_started_here()

    def stop_started_here(self) -> None:
        """Stop the nodes this object started (last first); nodes it found running stay up."""
        for index in sorted(self._started_here, reverse=True):
            self.stop_node(index)


def recorded_nodes(base_dir: Path = DEFAULT_BASE_DIR) -> list[NodeConfig]:
    """Nodes that have a node.json under ``base_dir``, in index order."""
    nodes = []
    for node_dir in sorted(base_dir.glob("*/"), key=lambda p: (len(p.name), p.name)):
        record = read_record(node_dir)
        if record is None or not node_dir.name.isdigit():
            continue
        requested = record.get("requested_port")
        nodes.append(
            NodeConfig(
                index=int(node_dir.name),
                nodes=int(record["nodes"]),  # type: ignore[call-overload]
                port=int(record["port"]),  # type: ignore[call-overload]
                storage_port=int(record["storage_port"]),  # type: ignore[call-overload]
                base_dir=base_dir,
                cluster_name=str(record["cluster_name"]),
                requested_port=None if requested is None else int(requested),  # type: ignore[call-overload]
                durable=bool(record.get("durable", False)),
                auth=bool(record.get("auth", False)),
                tls=check_tls_mode(record.get("tls")),
                data_center=None
                if record.get("data_center") is None
                else str(record["data_center"]),
            )
        )
    return nodes


def stop_recorded(base_dir: Path = DEFAULT_BASE_DIR, timeout: float = STOP_TIMEOUT) -> int:
    """Stop every node recorded under ``base_dir`` (last first); returns how many were stopped."""
    return sum(stop(node, timeout) for node in reversed(recorded_nodes(base_dir)))
