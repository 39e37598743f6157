"""Network faults on loopback for the local cluster: a node cut off from everyone, or cut off
one way (it can send, not receive), by iptables rules, and healed.

The rules live in one chain of this test run (``CQF<pid>x<random>``), jumped to from OUTPUT
(every packet between local processes passes OUTPUT once). Each rule names the cluster's own
ports (its CQL and storage ports) and the node: a rule can never match a packet of another
Cassandra on this machine (the development node on 9042/7000).

What is addressed to a node carries its address (127.0.0.N). What it sends does not always:
Cassandra opens its connections to the other nodes without binding them, so they leave from
127.0.0.1 like everyone else's. The nodes therefore start in a cgroup v2 each
(``LocalCassandra(cgroups=...)``), and the rule for what a node sends matches its cgroup
(``-m cgroup --path``). Cutting a node "from everyone" drops both; "it can send, not receive"
drops only what is addressed to it (Cassandra sends each direction on its own connection, so
its messages still arrive and nothing comes back to it but TCP acknowledgements).

Removal is certain: :meth:`NetworkFaults.heal` flushes the chain, :meth:`NetworkFaults.close`
(called by the fixture's ``finally`` and by ``atexit``) unhooks and deletes it, and a new
harness first deletes the chains of earlier runs whose process is gone (a SIGKILLed pytest).

It never skips: when iptables is missing, cannot be run (not root) or its rules do not take
effect (a probe connection still gets through), it raises :class:`NetworkFaultError`, and the
test fails with what to install.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cassieq_dev.local_cassandra import LocalCassandra

log = logging.getLogger(__name__)

CHAIN_PREFIX = "CQF"
_CHAIN = re.compile(rf"^{CHAIN_PREFIX}(\d+)x[0-9a-f]+$")
# Both directions (the classic partition), or only what goes to the node: it can send, not
# receive (its packets reach the others; their replies and requests never reach it).
BOTH, INBOUND = "both", "inbound"


class NetworkFaultError(RuntimeError):
    """The packet filter could not be set up or a rule did not take effect."""


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("iptables")
    if exe is None:
        raise NetworkFaultError(
            "iptables is not installed: the partition tests need it "
            "(`apt-get install -y iptables`, as root; .ci/run installs it)"
        )
    proc = subprocess.run([exe, "-w", "5", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetworkFaultError(
            f"`iptables {' '.join(args)}` failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()}; the partition tests must run as root with iptables"
        )
    return proc


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_chain(chain: str) -> None:
    """Unhook ``chain`` from OUTPUT (every jump to it), flush and delete it. Idempotent."""
    while _iptables("-D", "OUTPUT", "-j", chain, check=False).returncode == 0:
        pass
    _iptables("-F", chain, check=False)
    _iptables("-X", chain, check=False)


def remove_leftover_chains() -> list[str]:
    """Delete the chains of earlier harness runs whose process is gone; returns their names."""
    listing = _iptables("-S").stdout
    chains = {line.split()[1] for line in listing.splitlines() if line.startswith("-N ")}
    removed = []
    for chain in sorted(chains):
        match = _CHAIN.match(chain)
        if match and not _pid_alive(int(match.group(1))):
            remove_chain(chain)
            removed.append(chain)
    if removed:
        log.warning("removed packet-filter chains left by earlier runs: %s", removed)
    return removed


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted, or None."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


def node_cgroups(name: str) -> Path | None:
    """A cgroup v2 directory for the nodes of local cluster ``name`` when this process may make
    one (root, cgroup v2 mounted), else None: the cluster then runs without, and only cutting
    a node from everyone fails (loudly)."""
    root = cgroup2_root()
    if root is None or os.geteuid() != 0 or not os.access(root, os.W_OK):
        return None
    return root / "cassieq" / name


def _connects(address: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


class NetworkFaults:
    """Cut nodes of a local cluster off on the cluster's own CQL and storage ports, and heal."""

    def __init__(self, cluster: LocalCassandra):
        ports = (cluster.port, cluster.storage_port)
        if any(p in (9042, 7000) for p in ports):
            raise ValueError(f"ports must be the test cluster's own, not 9042/7000: {ports}")
        self.cluster = cluster
        if os.geteuid() != 0:
            raise NetworkFaultError(
                "the partition tests need root to set iptables rules (CI runs as root)"
            )
        self.ports = ports
        remove_leftover_chains()
        self.chain = f"{CHAIN_PREFIX}{os.getpid()}x{secrets.token_hex(3)}"
        _iptables("-N", self.chain)
        self._closed = False
        atexit.register(self.close)
        try:
            _iptables("-I", "OUTPUT", "1", "-j", self.chain)
        except BaseException:
            self.close()
            raise
        self.cut_addresses: dict[str, str] = {}

    def _sender_cgroup(self, index: int) -> str:
        """Node ``index``'s cgroup as iptables names it (relative to the cgroup v2 root), after
        checking that its JVM runs in it."""
        cgroup, root = self.cluster.node_cgroup(index), cgroup2_root()
        pid = self.cluster.pid(index)
        if cgroup is None or root is None or pid is None:
            raise NetworkFaultError(
                f"node {index} has no cgroup (or is not running): cutting what it sends needs "
                "the cluster started as root with cgroup v2 (LocalCassandra(cgroups=...))"
            )
        relative = "/" + str(cgroup.relative_to(root))
        if f"0::{relative}\n" not in Path(f"/proc/{pid}/cgroup").read_text():
            raise NetworkFaultError(
                f"node {index} (pid {pid}) does not run in {cgroup}: it was started by an "
                "earlier run without it; stop the cluster (`python -m cassieq_dev.local_cassandra "
                "down --all`) and run again"
            )
        return relative.lstrip("/")

    def _rules(self, index: int, direction: str) -> list[list[str]]:
        ports = ",".join(str(p) for p in self.ports)
        match = ["-p", "tcp", "-m", "multiport", "--ports", ports, "-j", "DROP"]
        to_node = ["-d", f"{self.cluster.node(index).address}/32", *match]
        if direction == INBOUND:
            return [to_node]
        if direction == BOTH:
            return [to_node, ["-m", "cgroup", "--path", self._sender_cgroup(index), *match]]
        raise ValueError(f"direction must be {BOTH!r} or {INBOUND!r}, got {direction!r}")

    def cut(self, index: int, direction: str = BOTH) -> None:
        """Drop node ``index``'s packets on the cluster's ports (``BOTH``: to and from it;
        ``INBOUND``: only to it), then prove it: a new connection to it must not get through."""
        address = self.cluster.node(index).address
        if address == "127.0.0.1":
            raise ValueError("refusing to cut 127.0.0.1 (other work shares it); cut node 2 or 3")
        for rule in self._rules(index, direction):
            _iptables("-A", self.chain, *rule)
        self.cut_addresses[address] = direction
        if _connects(address, self.ports[0], timeout=1.0):
            raise NetworkFaultError(
                f"a connection to {address}:{self.ports[0]} still got through after the rules "
                f"were set (chain {self.chain}); `iptables -S` shows what is in force"
            )
        log.info("cut %s off (%s) on ports %s", address, direction, self.ports)

    def heal(self) -> None:
        """Remove every cut (flush the chain); the hook in OUTPUT stays for the next one."""
        _iptables("-F", self.chain)
        self.cut_addresses.clear()

    @contextmanager
    def partitioned(self, index: int, direction: str = BOTH) -> Iterator[None]:
        """Node ``index`` cut off for the ``with`` block, healed whatever happens."""
        self.cut(index, direction)
        try:
            yield
        finally:
            self.heal()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        remove_chain(self.chain)
        atexit.unregister(self.close)


def wait_reachable(address: str, port: int, timeout: float = 30.0) -> float:
    """Seconds until a TCP connection to ``address:port`` gets through (after a heal)."""
    started = time.monotonic()
    while not _connects(address, port, 1.0):
        if time.monotonic() - started > timeout:
            raise NetworkFaultError(
                f"{address}:{port} still unreachable {timeout:.0f} s after heal"
            )
        time.sleep(0.2)
    return time.monotonic() - started
