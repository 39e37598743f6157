"""Run a real Apache Cassandra 5.0 (one node or a small cluster) from its Maven jars, on loopback.

Node ``n`` (1-based) listens on ``127.0.0.n``; all nodes share the same native and storage ports
and use ``127.0.0.1`` as seed. Each node keeps its rendered ``cassandra.yaml``, data, logs, console
output, a ``node.json`` record and a ``cassandra.pid`` file under ``<base_dir>/<n>/`` (by default
``.cassandra/nodes/<n>/``, git-ignored). The JVM is started in its own session, so it outlives the
Python process that launched it.

Command line (used by the Makefile)::

    python -m cassieq_spark.local_cassandra up --nodes 1 --port 9042 [--heap 512M]
    python -m cassieq_spark.local_cassandra status
    python -m cassieq_spark.local_cassandra down

From Python::

    with LocalCassandra(nodes=1) as c:      # starts what is not running, stops only that
        print(c.contact_points, c.port)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from string import Template
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "conf"
STATE_DIR = ROOT / ".cassandra"
LIB_DIR = STATE_DIR / "lib"
DEFAULT_BASE_DIR = STATE_DIR / "nodes"
DEFAULT_PORT = 9042
DEFAULT_STORAGE_PORT = 7000
DEFAULT_STARTUP_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0
# A joining node must hear from the seed within one ring delay or it fails with "Unable to contact
# any seeds". 1 s was enough on an idle machine but failed three retries in a row on a loaded 2-core
# CI runner; 5 s costs about 10 s per joining node and only multi-node rings pay it.
RING_DELAY_MS = 5000
AVAILABLE_PROCESSORS = 2
SUPPORTED_JAVA = (11, 17)
SEED_ADDRESS = "127.0.0.1"
MAIN_CLASS = "org.apache.cassandra.service.CassandraDaemon"
PID_FILE = "cassandra.pid"
NODE_FILE = "node.json"
CONSOLE_FILE = "console.log"
LOG_TAIL_LINES = 40


class CassandraError(RuntimeError):
    """The local Cassandra could not be started, stopped or found."""


def default_heap(nodes: int) -> str:
    """512M for a lone node, less per node for a cluster on a small machine."""
    return "512M" if nodes == 1 else "384M"


def node_address(index: int) -> str:
    if not 1 <= index <= 254:
        raise ValueError(f"node index must be in 1..254, got {index}")
    return f"127.0.0.{index}"


def initial_token(index: int, nodes: int) -> int:
    """Murmur3 token for node ``index`` of ``nodes`` (num_tokens 1): the middle of the node's
    equal slice of the ring, so tokens are evenly spread, a lone node gets 0 and none is the
    reserved minimum token."""
    return -(2**63) + (2 * index - 1) * 2**64 // (2 * nodes)


@dataclass(frozen=True)
class NodeConfig:
    """Everything that differs between the nodes of a local cluster."""

    index: int
    nodes: int
    port: int
    storage_port: int
    base_dir: Path
    cluster_name: str

    @property
    def address(self) -> str:
        return node_address(self.index)

    @property
    def token(self) -> int:
        return initial_token(self.index, self.nodes)

    @property
    def node_dir(self) -> Path:
        return self.base_dir / str(self.index)

    @property
    def log_dir(self) -> Path:
        return self.node_dir / "logs"

    @property
    def system_log(self) -> Path:
        return self.log_dir / "system.log"

    @property
    def yaml_path(self) -> Path:
        return self.node_dir / "cassandra.yaml"

    @property
    def pid_file(self) -> Path:
        return self.node_dir / PID_FILE

    def record(self) -> dict[str, object]:
        return {
            "index": self.index,
            "nodes": self.nodes,
            "port": self.port,
            "storage_port": self.storage_port,
            "cluster_name": self.cluster_name,
        }


def render_yaml(node: NodeConfig, template: str | None = None) -> str:
    """Fill conf/cassandra.yaml (or ``template``) for one node."""
    text = template if template is not None else (CONF_DIR / "cassandra.yaml").read_text()
    return Template(text).substitute(
        cluster_name=node.cluster_name,
        initial_token=node.token,
        seeds=SEED_ADDRESS,
        address=node.address,
        storage_port=node.storage_port,
        native_port=node.port,
        node_dir=node.node_dir.as_posix(),
    )


def read_jvm_options(path: Path | None = None) -> list[str]:
    """Flags from conf/jvm.options: one per line, blank lines and ``#`` comments skipped."""
    text = (path or CONF_DIR / "jvm.options").read_text()
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def jvm_args(
    node: NodeConfig,
    heap: str,
    lib_dir: Path = LIB_DIR,
    conf_dir: Path = CONF_DIR,
) -> list[str]:
    """Arguments after ``java`` that start ``node``."""
    jamm = sorted(lib_dir.glob("jamm-*.jar"))
    if not jamm:
        raise CassandraError(f"no jamm jar in {lib_dir}; run `make setup`")
    props = {
        "cassandra.config": node.yaml_path.resolve().as_uri(),
        "cassandra.storagedir": node.node_dir,
        "cassandra.logdir": node.log_dir,
        "cassandra-foreground": "yes",
        "logback.configurationFile": (conf_dir / "logback.xml").resolve().as_uri(),
        "cassandra.skip_wait_for_gossip_to_settle": 0,
        "cassandra.superuser_setup_delay_ms": 0,
        "cassandra.ring_delay_ms": RING_DELAY_MS,
        "cassandra.skip_sync": "true",
        "cassandra.unsafesystem": "true",
        "cassandra.available_processors": AVAILABLE_PROCESSORS,
        "cassandra.initial_token": node.token,
        "cassandra.native_transport_port": node.port,
        "cassandra.storage_port": node.storage_port,
        "jna.tmpdir": node.node_dir / "tmp",
    }
    return [
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *read_jvm_options(conf_dir / "jvm.options"),
        f"-javaagent:{jamm[-1]}",
        *(f"-D{key}={value}" for key, value in props.items()),
        "-cp",
        f"{conf_dir}{os.pathsep}{lib_dir}/*",
        MAIN_CLASS,
    ]


def java_major_version(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=True)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise CassandraError(f"cannot read the version of {java}: {out.stderr.strip()}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def find_java() -> str:
    """The java binary from JAVA_HOME or PATH, checked to be a version Cassandra 5.0 supports."""
    java_home = os.environ.get("JAVA_HOME")
    java = None
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        java = str(Path(java_home) / "bin" / "java")
    java = java or shutil.which("java")
    if not java:
        raise CassandraError("no java found: set JAVA_HOME or put java 11 or 17 on PATH")
    major = java_major_version(java)
    if major not in SUPPORTED_JAVA:
        raise CassandraError(f"{java} is Java {major}; Cassandra 5.0 needs Java 11 or 17")
    return java


def check_lib_dir(lib_dir: Path = LIB_DIR) -> None:
    if not any(lib_dir.glob("cassandra-all-*.jar")):
        raise CassandraError(f"Cassandra jars not found in {lib_dir}: run `make setup`")


def read_rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` from /proc/<pid>/status, or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def port_open(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def query_node(address: str, port: int, cql: str, timeout: float = 5.0) -> list[Any] | None:
    """Rows of ``cql`` run on the node at address:port itself, or None if it does not answer."""
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
    )
    try:
        return list(cluster.connect().execute(cql))
    except Exception as exc:  # any failure means "not answering (yet)"
        log.debug("%s:%s does not answer CQL: %s", address, port, exc)
        return None
    finally:
        cluster.shutdown()


def query_release_version(address: str, port: int, timeout: float = 5.0) -> str | None:
    """``release_version`` of the node at address:port through CQL, or None if it does not answer."""
    rows = query_node(address, port, "SELECT release_version FROM system.local", timeout)
    return rows[0].release_version if rows else None


def query_peers(address: str, port: int, timeout: float = 5.0) -> set[str] | None:
    """Addresses in the ``system.peers`` table of the node at address:port, or None."""
    rows = query_node(address, port, "SELECT peer FROM system.peers", timeout)
    return None if rows is None else {str(row.peer) for row in rows}


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} does not exist)"


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


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
    """A local Cassandra node or cluster on 127.0.0.1..127.0.0.N, managed through pid files."""

    def __init__(
        self,
        nodes: int = 1,
        port: int = DEFAULT_PORT,
        storage_port: int = DEFAULT_STORAGE_PORT,
        heap: str | None = None,
        base_dir: Path | str | None = None,
        cluster_name: str | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
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
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._started_here: list[int] = []

    # --- description -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def contact_points(self) -> list[str]:
        return [node_address(i) for i in range(1, self.nodes + 1)]

    def node(self, index: int) -> NodeConfig:
        if not 1 <= index <= self.nodes:
            raise ValueError(f"node index must be in 1..{self.nodes}, got {index}")
        return NodeConfig(
            index, self.nodes, self._port, self.storage_port, self.base_dir, self.cluster_name
        )

    # --- state -------------------------------------------------------------------------------
    def pid(self, index: int) -> int | None:
        """The recorded pid of node ``index`` if that process is alive and is this node's JVM."""
        return _live_pid(self.node(index))

    def is_node_running(self, index: int) -> bool:
        return self.pid(index) is not None

    def is_node_answering(self, index: int) -> bool:
        node = self.node(index)
        return (
            self.pid(index) is not None
            and query_release_version(node.address, node.port) is not None
        )

    def is_running(self) -> bool:
        """True when every node's process is alive and answers CQL."""
        return all(self.is_node_answering(i) for i in range(1, self.nodes + 1))

    # --- start / stop --------------------------------------------------------------------------
    def start(self) -> list[NodeReady]:
        """Start every node that is not running, one after another, and wait for CQL on each."""
        return [self._start_joining(i) for i in range(1, self.nodes + 1)]

    def _start_joining(self, index: int, attempts: int = 3) -> NodeReady:
        """A joining node sometimes gives up on a seed that is busy (seen on 2 loaded cores:
        "Unable to contact any seeds"). It never joined, so its data can go and it can retry."""
        for attempt in range(1, attempts + 1):
            try:
                return self.start_node(index)
            except CassandraError as exc:
                if index == 1 or attempt == attempts or self.is_node_running(index):
                    raise
                log.warning("node %d failed to join (%s); retrying from scratch", index, exc)
                node = self.node(index)
                for sub in ("data", "commitlog", "saved_caches", "hints"):
                    shutil.rmtree(node.node_dir / sub, ignore_errors=True)
                time.sleep(5)
        raise AssertionError("unreachable")

    def start_node(self, index: int) -> NodeReady:
        node = self.node(index)
        started = time.monotonic()
        pid = self.pid(index)
        if pid is not None:
            recorded = _read_record(node.node_dir)
            if recorded and (recorded.get("port"), recorded.get("storage_port")) != (
                node.port,
                node.storage_port,
            ):
                raise CassandraError(
                    f"node {index} is already running with {recorded}; stop it first (`down`)"
                )
            self._wait_ready(node, started)
            return NodeReady(index, node.address, node.port, pid, 0.0, read_rss_bytes(pid), True)

        check_lib_dir()
        java = find_java()
        for port in (node.port, node.storage_port):
            if port_open(node.address, port):
                raise CassandraError(
                    f"{node.address}:{port} is in use by a process this launcher did not start"
                )
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc_raw", "logs", "tmp"):
            (node.node_dir / sub).mkdir(parents=True, exist_ok=True)
        node.yaml_path.write_text(render_yaml(node))
        (node.node_dir / NODE_FILE).write_text(json.dumps(node.record(), indent=2) + "\n")

        cmd = [java, *jvm_args(node, self.heap)]
        log.info("starting Cassandra node %d on %s:%d", index, node.address, node.port)
        with open(node.node_dir / CONSOLE_FILE, "ab") as console:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd=node.node_dir,
                start_new_session=True,
                close_fds=True,
            )
        self._procs[index] = proc
        node.pid_file.write_text(f"{proc.pid}\n")
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
            exited = proc.poll() is not None if proc else _live_pid(node) is None
            if exited:
                raise CassandraError(_failure(node, "the Cassandra process exited during startup"))
            if query_release_version(node.address, node.port) is not None:
                return
            if time.monotonic() > deadline:
                raise CassandraError(
                    _failure(node, f"no CQL answer within {self.startup_timeout:.0f} s")
                )
            time.sleep(0.5)

    def wait_ring(self, deadline: float) -> None:
        """Wait until every running node lists every other running node in system.peers."""
        while True:
            running = {
                self.node(i).address for i in range(1, self.nodes + 1) if self.is_node_running(i)
            }
            missing = {}
            for address in sorted(running):
                peers = query_peers(address, self._port)
                if peers is None or not running - {address} <= peers:
                    missing[address] = running - {address} - (peers or set())
            if not missing:
                return
            if time.monotonic() > deadline:
                raise CassandraError(f"ring did not converge; peers missing per node: {missing}")
            time.sleep(0.5)

    def stop_node(self, index: int, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM the recorded process of node ``index``, SIGKILL after ``timeout``.

        Returns True if a process was stopped.
        """
        stopped = _stop(self.node(index), timeout, self._procs.pop(index, None))
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
            raise CassandraError(f"refusing to wipe {self.base_dir}: a node is running")
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # --- context manager -----------------------------------------------------------------------
    def __enter__(self) -> LocalCassandra:
        try:
            self.start()
        except BaseException:
            self._stop_started_here()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_started_here()

    def _stop_started_here(self) -> None:
        for index in sorted(self._started_here, reverse=True):
            self.stop_node(index)


# --- pid-file helpers (shared by LocalCassandra and the CLI) ---------------------------------------
def _read_pid(node_dir: Path) -> int | None:
    try:
        return int((node_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _read_record(node_dir: Path) -> dict[str, object] | None:
    try:
        return json.loads((node_dir / NODE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _live_pid(node: NodeConfig) -> int | None:
    """The pid from the pid file if that process is alive and is the JVM of this node directory."""
    pid = _read_pid(node.node_dir)
    if pid is None or _is_zombie(pid):
        return None
    cmdline = _cmdline(pid)
    if MAIN_CLASS in cmdline and f"-Dcassandra.storagedir={node.node_dir} " in cmdline:
        return pid
    return None


def _stop(node: NodeConfig, timeout: float, proc: subprocess.Popen[bytes] | None) -> bool:
    pid = _live_pid(node)
    if pid is None:
        node.pid_file.unlink(missing_ok=True)
        return False
    log.info("stopping Cassandra node %d (pid %d)", node.index, pid)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        if not _wait_exit(pid, timeout, proc):
            log.warning("node %d did not stop within %.0f s; sending SIGKILL", node.index, timeout)
            os.kill(pid, signal.SIGKILL)
            _wait_exit(pid, 10.0, proc)
    node.pid_file.unlink(missing_ok=True)
    return True


def _wait_exit(pid: int, timeout: float, proc: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return True
        if _is_zombie(pid):
            return True
        time.sleep(0.2)
    return False


def _failure(node: NodeConfig, reason: str) -> str:
    return (
        f"Cassandra node {node.index} ({node.address}:{node.port}) failed to start: {reason}\n"
        f"--- last {LOG_TAIL_LINES} lines of {node.system_log} ---\n{tail(node.system_log)}\n"
        f"--- last 15 lines of {node.node_dir / CONSOLE_FILE} ---\n"
        f"{tail(node.node_dir / CONSOLE_FILE, 15)}"
    )


def recorded_nodes(base_dir: Path = DEFAULT_BASE_DIR) -> list[NodeConfig]:
    """Nodes that have a node.json under ``base_dir``, in index order."""
    nodes = []
    for node_dir in sorted(base_dir.glob("*/"), key=lambda p: (len(p.name), p.name)):
        record = _read_record(node_dir)
        if record is None or not node_dir.name.isdigit():
            continue
        nodes.append(
            NodeConfig(
                index=int(node_dir.name),
                nodes=int(record["nodes"]),  # type: ignore[call-overload]
                port=int(record["port"]),  # type: ignore[call-overload]
                storage_port=int(record["storage_port"]),  # type: ignore[call-overload]
                base_dir=base_dir,
                cluster_name=str(record["cluster_name"]),
            )
        )
    return nodes


def stop_recorded(base_dir: Path = DEFAULT_BASE_DIR, timeout: float = STOP_TIMEOUT) -> int:
    """Stop every node recorded under ``base_dir`` (last first); returns how many were stopped."""
    return sum(_stop(node, timeout, None) for node in reversed(recorded_nodes(base_dir)))


# --- command line ----------------------------------------------------------------------------------
def _out(message: object, error: bool = False) -> None:
    print(message, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def _base_dirs(args: argparse.Namespace) -> list[Path]:
    if getattr(args, "all", False):
        return sorted(p for p in STATE_DIR.iterdir() if p.is_dir() and p.name != "lib")
    return [Path(args.base_dir).resolve()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cassieq_spark.local_cassandra")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N nodes (idempotent) and wait until they answer CQL")
    up.add_argument("--nodes", type=int, default=1)
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="native (CQL) port")
    up.add_argument("--storage-port", type=int, default=DEFAULT_STORAGE_PORT)
    up.add_argument("--heap", default=None, help="per node, e.g. 512M (default 512M, 384M if N>1)")
    up.add_argument("--timeout", type=float, default=DEFAULT_STARTUP_TIMEOUT, help="seconds")
    for name in ("up", "down", "status"):
        p = up if name == "up" else sub.add_parser(name)
        p.add_argument("--base-dir", default=str(DEFAULT_BASE_DIR))
    sub.choices["down"].add_argument(
        "--all", action="store_true", help="every node directory under .cassandra/"
    )
    sub.choices["down"].help = "stop the nodes recorded in pid files"
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("cassandra").setLevel(logging.CRITICAL)

    if args.command == "up":
        cluster = LocalCassandra(
            nodes=args.nodes,
            port=args.port,
            storage_port=args.storage_port,
            heap=args.heap,
            base_dir=args.base_dir,
            startup_timeout=args.timeout,
        )
        try:
            for ready in cluster.start():
                _out(ready.describe())
        except CassandraError as exc:
            _out(exc, error=True)
            return 1
        return 0

    if args.command == "down":
        stopped = sum(stop_recorded(base) for base in _base_dirs(args))
        _out(f"stopped {stopped} Cassandra node(s)")
        return 0

    running = 0
    nodes = recorded_nodes(Path(args.base_dir).resolve())
    if not nodes:
        _out(f"no Cassandra node recorded under {args.base_dir}")
    for node in nodes:
        pid = _live_pid(node)
        version = query_release_version(node.address, node.port) if pid else None
        running += pid is not None
        state = "stopped"
        if pid is not None:
            state = f"running (pid {pid}), " + (
                f"answering CQL, release {version}" if version else "not answering CQL"
            )
        _out(f"node {node.index} {node.address}:{node.port}: {state}")
    return 0 if running else 1


if __name__ == "__main__":
    sys.exit(main())
