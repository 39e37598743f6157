"""Run a real Apache Cassandra 5.0 (one node or a small cluster) from its Maven jars, on loopback.

Node ``n`` (1-based) listens on ``127.0.0.n``; all nodes share the same native and storage ports
and use ``127.0.0.1`` as seed. Each node keeps its rendered ``cassandra.yaml``, data, logs, console
output, a ``node.json`` record and a ``cassandra.pid`` file under ``<base_dir>/<n>/`` (by default
``.cassandra/nodes/<n>/``, git-ignored). The JVM is started in its own session, so it outlives the
Python process that launched it.

Command line (used by the Makefile)::

    python -m cassieq_dev.local_cassandra up --nodes 1 --port 9042 [--heap 512M]
    python -m cassieq_dev.local_cassandra status
    python -m cassieq_dev.local_cassandra down

From Python::

    with LocalCassandra(nodes=1) as c:      # starts what is not running, stops only that
        print(c.contact_points, c.port)

One data center (SimpleSnitch) unless ``data_centers`` is given: ``LocalCassandra(nodes=3,
data_centers=[("dc1", 2), ("dc2", 1)])`` puts nodes 1-2 in dc1 and node 3 in dc2, each node
running GossipingPropertyFileSnitch with a ``cassandra-rackdc.properties`` of its own.

Modules: ``config`` (paths, cassandra.yaml and JVM flags of one node), ``process`` (one node's
JVM: start, recognise, stop), ``probe`` (ports and CQL readiness), ``ring`` (joining nodes into a
ring), ``cluster`` (:class:`LocalCassandra`), ``clock`` (a node whose wall clock runs ahead or
behind: ``java/OffsetClock.java`` through Cassandra's clock seam), ``endpoint`` (use the Cassandra already on a port,
or start one, on a free port if that one is taken), ``cli`` (the command line).
"""

from .cli import failure_line, main, report_failure
from .clock import (
    OFFSET_CLOCK_CLASS,
    OFFSET_PROPERTY,
    compile_offset_clock,
    offset_clock,
    offset_clock_extras,
)
from .cluster import LocalCassandra, NodeReady, recorded_nodes, stop_recorded
from .config import (
    AVAILABLE_PROCESSORS,
    CONF_DIR,
    CONSOLE_FILE,
    DATA_CENTER_SNITCH,
    DEFAULT_BASE_DIR,
    DEFAULT_PORT,
    DEFAULT_SNITCH,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STORAGE_PORT,
    LIB_DIR,
    LOG_TAIL_LINES,
    MAIN_CLASS,
    NODE_FILE,
    PID_FILE,
    RACKDC_PROPERTY,
    RING_DELAY_MS,
    ROOT,
    SEED_ADDRESS,
    STATE_DIR,
    STOP_TIMEOUT,
    SUPPORTED_JAVA,
    CassandraError,
    JvmExtras,
    NodeConfig,
    data_center_layout,
    default_heap,
    initial_token,
    jvm_args,
    node_address,
    rackdc_extras,
    rackdc_properties,
    read_jvm_options,
    render_yaml,
)
from .endpoint import Endpoint, cassandra_endpoint, ensure_cassandra
from .probe import (
    free_port,
    port_free,
    port_open,
    query_node,
    query_peers,
    query_release_version,
)
from .process import check_lib_dir, find_java, java_major_version, read_rss_bytes, tail

__all__ = [
    "AVAILABLE_PROCESSORS",
    "CONF_DIR",
    "CONSOLE_FILE",
    "DATA_CENTER_SNITCH",
    "DEFAULT_BASE_DIR",
    "DEFAULT_PORT",
    "DEFAULT_SNITCH",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_STORAGE_PORT",
    "LIB_DIR",
    "LOG_TAIL_LINES",
    "MAIN_CLASS",
    "NODE_FILE",
    "PID_FILE",
    "RACKDC_PROPERTY",
    "RING_DELAY_MS",
    "ROOT",
    "SEED_ADDRESS",
    "STATE_DIR",
    "STOP_TIMEOUT",
    "SUPPORTED_JAVA",
    "CassandraError",
    "Endpoint",
    "LocalCassandra",
    "NodeConfig",
    "NodeReady",
    "OFFSET_CLOCK_CLASS",
    "OFFSET_PROPERTY",
    "check_lib_dir",
    "compile_offset_clock",
    "data_center_layout",
    "cassandra_endpoint",
    "default_heap",
    "ensure_cassandra",
    "failure_line",
    "find_java",
    "free_port",
    "initial_token",
    "java_major_version",
    "JvmExtras",
    "jvm_args",
    "main",
    "node_address",
    "offset_clock",
    "offset_clock_extras",
    "port_free",
    "port_open",
    "rackdc_extras",
    "rackdc_properties",
    "query_node",
    "query_peers",
    "query_release_version",
    "read_jvm_options",
    "report_failure",
    "read_rss_bytes",
    "recorded_nodes",
    "render_yaml",
    "stop_recorded",
    "tail",
]
