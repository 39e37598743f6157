"""One node's JVM: finding java, starting it in its own session, recognising it from its pid file,
stopping it, and reading its logs when it fails."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

import psutil

from .config import (
    CONSOLE_FILE,
    LIB_DIR,
    LOG_TAIL_LINES,
    MAIN_CLASS,
    NODE_FILE,
    PID_FILE,
    SUPPORTED_JAVA,
    CassandraError,
    JvmExtras,
    NodeConfig,
    jvm_args,
    rackdc_extras,
    rackdc_properties,
    render_yaml,
)

log = logging.getLogger(__name__)

NODE_SUBDIRS = ("data", "commitlog", "saved_caches", "hints", "cdc_raw", "logs", "tmp")


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
        raise CassandraError(
            f"{java} is Java {major}; Cassandra 5.0 needs Java 11 or 17 (set JAVA_HOME)"
        )
    return java


def check_lib_dir(lib_dir: Path = LIB_DIR) -> None:
    if not any(lib_dir.glob("cassandra-all-*.jar")):
        raise CassandraError(f"Cassandra jars not found in {lib_dir}: run `make setup`")


def read_rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid``, or None when it is gone or not ours to read."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} does not exist)"


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def _is_zombie(pid: int) -> bool:
    """True when ``pid`` is gone or a zombie (exited, not yet reaped): not a live node."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return True


def read_pid(node_dir: Path) -> int | None:
    try:
        return int((node_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def read_record(node_dir: Path) -> dict[str, object] | None:
    """The node.json written when the node in ``node_dir`` was last started, or None."""
    try:
        return json.loads((node_dir / NODE_FILE).read_text())
    except (OSError, ValueError):
        return None


def live_pid(node: NodeConfig) -> int | None:
    """The pid from the pid file if that process is alive and is the JVM of this node directory."""
    pid = read_pid(node.node_dir)
    if pid is None or _is_zombie(pid):
        return None
    cmdline = _cmdline(pid)
    if MAIN_CLASS in cmdline and f"-Dcassandra.storagedir={node.node_dir} " in cmdline:
        return pid
    return None


def spawn(
    node: NodeConfig,
    java: str,
    heap: str,
    cgroup: Path | None = None,
    env: Mapping[str, str] | None = None,
    extras: JvmExtras | None = None,
) -> subprocess.Popen[bytes]:
    """Write the node's files and start its JVM in a session of its own (it outlives us).

    ``cgroup``: a cgroup v2 directory the JVM starts in (created if missing), so that every
    socket it opens carries it (a packet filter can then tell this node's packets from the
    other nodes', which all send from 127.0.0.1). ``env``: variables added to its environment.
    ``extras``: system properties and classpath entries of this node only. A node of a data
    center gets its rackdc file written and named to its JVM as well.
    """
    join_cgroup = None
    if cgroup is not None:
        cgroup.mkdir(parents=True, exist_ok=True)
        procs = cgroup / "cgroup.procs"

        def join_cgroup() -> None:  # in the child, before exec: "0" is the writing process
            procs.write_text("0")

    for sub in NODE_SUBDIRS:
        (node.node_dir / sub).mkdir(parents=True, exist_ok=True)
    node.yaml_path.write_text(render_yaml(node))
    if node.data_center is not None:
        node.rackdc_path.write_text(rackdc_properties(node))
    (node.node_dir / NODE_FILE).write_text(json.dumps(node.record(), indent=2) + "\n")
    cmd = [java, *jvm_args(node, heap, extras=rackdc_extras(node, extras))]
    log.info("starting Cassandra node %d on %s:%d", node.index, node.address, node.port)
    with open(node.node_dir / CONSOLE_FILE, "ab") as console:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            cwd=node.node_dir,
            start_new_session=True,
            close_fds=True,
            preexec_fn=join_cgroup,
            env={**os.environ, **env} if env else None,
        )
    node.pid_file.write_text(f"{proc.pid}\n")
    return proc


def wipe_join_state(node: NodeConfig) -> None:
    """Forget a node that never joined, so its next start begins from scratch."""
    for sub in ("data", "commitlog", "saved_caches", "hints"):
        shutil.rmtree(node.node_dir / sub, ignore_errors=True)


def stop(node: NodeConfig, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM the node's recorded JVM, SIGKILL after ``timeout``; True if one was running."""
    pid = live_pid(node)
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


def startup_failure(node: NodeConfig, reason: str) -> CassandraError:
    """One line naming the node, the reason and the log to read; the log tails as detail."""
    return CassandraError(
        f"Cassandra node {node.index} ({node.address}:{node.port}) failed to start: {reason}; "
        f"see {node.system_log} and {node.node_dir / CONSOLE_FILE}",
        detail=(
            f"--- last {LOG_TAIL_LINES} lines of {node.system_log} ---\n{tail(node.system_log)}\n"
            f"--- last 15 lines of {node.node_dir / CONSOLE_FILE} ---\n"
            f"{tail(node.node_dir / CONSOLE_FILE, 15)}"
        ),
    )
