"""Where the launcher keeps its files, and what one node's cassandra.yaml and JVM command line say.

Pure functions of a :class:`NodeConfig`: nothing here starts a process or opens a socket.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent.parent.parent
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
# A durable node (the default of `make cassandra-up` and `make demo`) syncs every write before
# acknowledging it ("batch" groups concurrent writes into one fsync). A fast node (the test
# harness's, `--fast`) syncs its commitlog every 10 s and skips fsync altogether (skip_sync,
# unsafesystem): a SIGKILL loses what it acknowledged, schema included.
FAST_COMMITLOG = "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms"
DURABLE_COMMITLOG = "commitlog_sync: batch"
# One data center (every cluster the launcher starts unless it is given data centers), and the
# snitch of a cluster of several: each node reads its data center and rack from a properties
# file of its own, named by the JVM system property RACKDC_PROPERTY (a URL; Cassandra 5.0's
# SnitchProperties reads that property before looking on the classpath).
DEFAULT_SNITCH = "SimpleSnitch"
DATA_CENTER_SNITCH = "GossipingPropertyFileSnitch"
RACKDC_PROPERTY = "cassandra-rackdc.properties"
RACKDC_FILE = "cassandra-rackdc.properties"
DEFAULT_RACK = "rack1"
_DC_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")


class CassandraError(RuntimeError):
    """The local Cassandra could not be started, stopped or found.

    ``str(error)`` is one line (what failed, where, what to do); ``detail`` holds what helps to
    diagnose it (log tails), shown by the command line only when ``DEBUG=1``.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def default_heap(nodes: int) -> str:
    """1G for a lone node: it serves the product's largest reads and writes (messages of
    queues.MAX_PAYLOAD_LIMIT, one messages.BODY_BUDGET_BYTES request at a time per caller) next
    to its memtables (a quarter of the heap) with room to spare; 512M per node of a cluster on
    a small machine."""
    return "1G" if nodes == 1 else "512M"


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
    """Everything that differs between the nodes of a local cluster.

    ``requested_port`` is the native port the caller asked for when the node runs on another one
    because that port was taken (see ``endpoint.py``); None when it runs where it was asked to.
    ``durable`` nodes keep everything they acknowledged through a SIGKILL (see DURABLE_COMMITLOG).
    """

    index: int
    nodes: int
    port: int
    storage_port: int
    base_dir: Path
    cluster_name: str
    requested_port: int | None = None
    durable: bool = False
    auth: bool = False
    tls: str | None = None  # None, "on" or "mutual" (see security.py)
    # The data center this node belongs to (GossipingPropertyFileSnitch reads it from the
    # node's RACKDC_FILE), or None: one data center, SimpleSnitch.
    data_center: str | None = None

    @property
    def snitch(self) -> str:
        return DEFAULT_SNITCH if self.data_center is None else DATA_CENTER_SNITCH

    @property
    def rackdc_path(self) -> Path:
        return self.node_dir / RACKDC_FILE

    @property
    def tls_dir(self) -> Path:
        """Shared by the nodes of a cluster: one CA, one node certificate for all addresses."""
        return self.base_dir / "tls"

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
        record: dict[str, object] = {
            "index": self.index,
            "nodes": self.nodes,
            "port": self.port,
            "storage_port": self.storage_port,
            "cluster_name": self.cluster_name,
        }
        if self.requested_port is not None:
            record["requested_port"] = self.requested_port
        if self.durable:
            record["durable"] = True
        if self.auth:
            record["auth"] = True
        if self.tls:
            record["tls"] = self.tls
        if self.data_center is not None:
            record["data_center"] = self.data_center
        return record


def render_yaml(node: NodeConfig, template: str | None = None) -> str:
    """Fill conf/cassandra.yaml (or ``template``) for one node."""
    from .security import TlsFiles, auth_yaml, tls_yaml  # security.py imports this module

    text = template if template is not None else (CONF_DIR / "cassandra.yaml").read_text()
    return Template(text).substitute(
        authentication=auth_yaml(node.auth),
        client_encryption=tls_yaml(node.tls, TlsFiles(node.tls_dir)),
        cluster_name=node.cluster_name,
        initial_token=node.token,
        seeds=SEED_ADDRESS,
        address=node.address,
        storage_port=node.storage_port,
        native_port=node.port,
        node_dir=node.node_dir.as_posix(),
        commitlog_sync=DURABLE_COMMITLOG if node.durable else FAST_COMMITLOG,
        snitch=node.snitch,
    )


def data_center_layout(layout: Sequence[tuple[str, int]], nodes: int) -> dict[int, str]:
    """Node index -> data center for ``layout``, pairs of (data center, how many nodes) in
    order: ``[("dc1", 2), ("dc2", 1)]`` puts nodes 1 and 2 in dc1 and node 3 in dc2. Node 1,
    the seed, is in the first data center."""
    out: dict[int, str] = {}
    seen: set[str] = set()
    for dc, count in layout:
        if not isinstance(dc, str) or not _DC_NAME.fullmatch(dc):
            raise ValueError(
                f"data center name must be 1-48 letters, digits, '_' or '-', got {dc!r}"
            )
        if dc in seen:
            raise ValueError(f"data center {dc!r} is named twice; give each once with its count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"data center {dc!r} needs at least one node, got {count!r}")
        seen.add(dc)
        for _ in range(count):
            out[len(out) + 1] = dc
    if len(out) != nodes:
        raise ValueError(
            f"the data centers hold {len(out)} nodes and the cluster has {nodes}: make the "
            "counts add up to the number of nodes"
        )
    return out


def rackdc_properties(node: NodeConfig) -> str:
    """The node's cassandra-rackdc.properties: its data center, one rack per data center."""
    if node.data_center is None:
        raise ValueError(f"node {node.index} belongs to no data center")
    return f"dc={node.data_center}\nrack={DEFAULT_RACK}\n"


def read_jvm_options(path: Path | None = None) -> list[str]:
    """Flags from conf/jvm.options: one per line, blank lines and ``#`` comments skipped."""
    text = (path or CONF_DIR / "jvm.options").read_text()
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


@dataclass(frozen=True)
class JvmExtras:
    """What one node's JVM gets beyond the others': system properties (a node's data center
    file, a clock of its own) and classpath entries (where such a class is compiled to).
    A property given here wins over the launcher's own of the same name."""

    props: Mapping[str, str] = field(default_factory=dict)
    classpath: tuple[Path, ...] = ()


def rackdc_extras(node: NodeConfig, extras: JvmExtras | None = None) -> JvmExtras | None:
    """``extras`` with the property that points the node's JVM at its rackdc file (a
    property already in ``extras`` wins); ``extras`` unchanged for a node of no data center."""
    if node.data_center is None:
        return extras
    base = extras or JvmExtras()
    props = {RACKDC_PROPERTY: node.rackdc_path.resolve().as_uri(), **base.props}
    return JvmExtras(props=props, classpath=base.classpath)


def jvm_args(
    node: NodeConfig,
    heap: str,
    lib_dir: Path = LIB_DIR,
    conf_dir: Path = CONF_DIR,
    extras: JvmExtras | None = None,
) -> list[str]:
    """Arguments after ``java`` that start ``node``."""
    jamm = sorted(lib_dir.glob("jamm-*.jar"))
    if not jamm:
        raise CassandraError(f"no jamm jar in {lib_dir}: run `make setup`")
    props = {
        "cassandra.config": node.yaml_path.resolve().as_uri(),
        "cassandra.storagedir": node.node_dir,
        "cassandra.logdir": node.log_dir,
        "cassandra-foreground": "yes",
        "logback.configurationFile": (conf_dir / "logback.xml").resolve().as_uri(),
        "cassandra.skip_wait_for_gossip_to_settle": 0,
        "cassandra.superuser_setup_delay_ms": 0,
        "cassandra.ring_delay_ms": RING_DELAY_MS,
        **(
            {}
            if node.durable
            else {"cassandra.skip_sync": "true", "cassandra.unsafesystem": "true"}
        ),
        "cassandra.available_processors": AVAILABLE_PROCESSORS,
        "cassandra.initial_token": node.token,
        "cassandra.native_transport_port": node.port,
        "cassandra.storage_port": node.storage_port,
        "jna.tmpdir": node.node_dir / "tmp",
        **(extras.props if extras else {}),
    }
    classpath = [
        str(conf_dir),
        *(str(p) for p in (extras.classpath if extras else ())),
        f"{lib_dir}/*",
    ]
    return [
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *read_jvm_options(conf_dir / "jvm.options"),
        f"-javaagent:{jamm[-1]}",
        *(f"-D{key}={value}" for key, value in props.items()),
        "-cp",
        os.pathsep.join(classpath),
        MAIN_CLASS,
    ]
