"""The original CassieQ server (Java) as the ``service`` suite's same-run baseline.

The original is in no package registry, and its source targets Java 8 (Dropwizard 0.9, Guice,
jersey2-guice). The suite takes a checkout that is already built (``--original-src DIR`` /
``CASSIEQ_ORIGINAL_SRC``: ``DIR/core/target/cassieq-core-*.jar``, the shaded server jar, and
``DIR/db/scripts/*.cql``, its schema); this project keeps no copy of its code, no binary built
from it and no recipe that builds it. What it adds to run that jar on this machine's Java 17 is
its own, cached under ``.cassandra/bench-original/`` (git-ignored, like the connector's side
environment):

- ``jars/``: libraries the JDK no longer ships or the jar bundles in a version that fails on
  Java 17 (``bench/original/pom.xml``, from Maven Central), put on the class path around it;
- ``classes/``: ``bench/original/InjectionsUtils.java``, written here, compiled with ``javac``
  against the server jar and put first on the class path: it stands in for jersey2-guice's
  class of that name, which clears a final field's modifier bit through ``Field.modifiers``
  (hidden since Java 12) and so stops the server while it creates its injector.

Each is rebuilt only when its stamp (the pom's hash; the shim's hash and the jar) changes.

A started server (``OriginalServer``) runs on loopback ports against the bench Cassandra in a
keyspace of its own (created from the checkout's schema file), its embedded Hazelcast pinned to
loopback on a free port with multicast off, with ``--add-opens`` for the JDK internals its
libraries reflect on and ``-Dcom.datastax.driver.FORCE_NIO=true`` (its driver's native epoll
transport does not load here). Accounts come from its admin API (no authentication there),
queues and messages from its API v1 with ``Authorization: Key``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .common import BenchConfig, SuiteUnavailable
from .machine import ROOT

log = logging.getLogger("bench.original")

ORIGINAL_ENV = "CASSIEQ_ORIGINAL_SRC"
HERE = ROOT / "bench" / "original"
POM = HERE / "pom.xml"
SHIM = HERE / "InjectionsUtils.java"
# Not under bench/: the unit tests walk bench/ for modules; .cassandra/ is git-ignored and
# `make clean` removes it.
CACHE = ROOT / ".cassandra" / "bench-original"
JARS = CACHE / "jars"
CLASSES = CACHE / "classes"
MAIN = "io.paradoxical.cassieq.ServiceApplication"
# JDK internals the server's libraries (Guice/cglib, Jersey, Netty, Hazelcast) reflect on.
OPENS = [
    "java.base/java.lang=ALL-UNNAMED",
    "java.base/java.lang.reflect=ALL-UNNAMED",
    "java.base/java.util=ALL-UNNAMED",
    "java.base/java.nio=ALL-UNNAMED",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
]
START_SECONDS = 180.0


def checkout(cfg: BenchConfig) -> str:
    """The checkout given by flag or environment, or '' when none is."""
    return cfg.original_src or os.environ.get(ORIGINAL_ENV, "")


def _run(cmd: list[str], what: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SuiteUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    if p.returncode != 0:
        tail = " | ".join((p.stdout + p.stderr).strip().splitlines()[-5:])
        raise SuiteUnavailable(f"{what} failed (exit {p.returncode}): {tail}")
    return p


def server_jar(src: Path) -> Path:
    """The checkout's shaded server jar; a clear error when the checkout is not built."""
    found = sorted(
        p
        for p in (src / "core" / "target").glob("cassieq-core-*.jar")
        if not p.name.endswith(("-sources.jar", "-javadoc.jar", "-tests.jar"))
    )
    if not found:
        raise SuiteUnavailable(
            f"no built server jar in {src}/core/target (cassieq-core-*.jar): the checkout "
            "must be built first (bench/README.md, the service suite)"
        )
    return found[-1]


def schema_file(src: Path) -> Path:
    found = sorted((src / "db" / "scripts").glob("*.cql"))
    if not found:
        raise SuiteUnavailable(f"no schema file in {src}/db/scripts (*.cql)")
    return found[0]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
        h.update(b"\0")
    return h.hexdigest()


def ensure_jars() -> str:
    """``jars/`` from ``bench/original/pom.xml``: 'cached' or 'built'."""
    digest = _digest(POM.read_bytes())
    stamp = JARS / ".resolved"
    if stamp.is_file() and stamp.read_text() == digest and any(JARS.glob("*.jar")):
        return "cached"
    if shutil.which("mvn") is None:
        raise SuiteUnavailable("mvn not installed: the original's runtime jars cannot be resolved")
    shutil.rmtree(JARS, ignore_errors=True)
    JARS.mkdir(parents=True)
    _run(
        [
            "mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
            f"-DoutputDirectory={JARS}", "-DexcludeTransitive=true",
        ],
        "mvn dependency:copy-dependencies (bench/original/pom.xml)",
        600,
    )  # fmt: skip
    stamp.write_text(digest)
    return "built"


def ensure_shim(jar: Path) -> str:
    """``classes/``: the jersey2-guice stand-in compiled against ``jar``: 'cached' or 'built'."""
    st = jar.stat()
    digest = _digest(SHIM.read_bytes(), str(jar).encode(), f"{st.st_size}:{st.st_mtime}".encode())
    stamp = CLASSES / ".compiled"
    if stamp.is_file() and stamp.read_text() == digest:
        return "cached"
    if shutil.which("javac") is None:
        raise SuiteUnavailable("javac not installed: the jersey2-guice stand-in cannot be compiled")
    shutil.rmtree(CLASSES, ignore_errors=True)
    CLASSES.mkdir(parents=True)
    _run(
        ["javac", "-nowarn", "-d", str(CLASSES), "-cp", str(jar), str(SHIM)],
        "javac bench/original/InjectionsUtils.java",
        300,
    )
    stamp.write_text(digest)
    return "built"


def java_version() -> str:
    p = _run(["java", "-version"], "java -version", 60)
    return (p.stderr or p.stdout).strip().splitlines()[0]


def prepare(src_dir: str) -> dict:
    """Everything a start needs, built or found in the cache; raises SuiteUnavailable with the
    reason when something is missing (no build in the checkout, no Java, no Maven)."""
    src = Path(src_dir).expanduser().resolve()
    if not src.is_dir():
        raise SuiteUnavailable(f"original checkout {src} is not a directory")
    if shutil.which("java") is None:
        raise SuiteUnavailable("java not installed: the original server cannot run")
    jar = server_jar(src)
    t0 = time.perf_counter()
    prep = {"jars": ensure_jars(), "shim": ensure_shim(jar)}
    hv = sorted(JARS.glob("hibernate-validator-*.jar"))
    rest = sorted(p for p in JARS.glob("*.jar") if p not in hv)
    return {
        "src": str(src),
        "jar": jar.name,
        "schema": schema_file(src),
        "class_path": os.pathsep.join(str(p) for p in [CLASSES, *hv, jar, *rest]),
        "java": java_version(),
        "prepare": prep,
        "prepare_seconds": round(time.perf_counter() - t0, 1),
    }


def create_schema(cfg: BenchConfig, keyspace: str, cql: Path) -> None:
    """The original's tables, from its own schema file, in ``keyspace`` (created, RF 1)."""
    from cassandra.cluster import Cluster

    hosts = [h.split(":")[0] for h in cfg.contact_points.split(",")]
    cluster = Cluster(hosts, port=cfg.port)
    try:
        session = cluster.connect()
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.set_keyspace(keyspace)
        for stmt in (s.strip() for s in cql.read_text().split(";")):
            if stmt:
                session.execute(re.sub(r"(?i)^CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", stmt))
    finally:
        cluster.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(cfg: BenchConfig, keyspace: str, app: int, admin: int, hazelcast: Path) -> str:
    points = ", ".join(h.split(":")[0] for h in cfg.contact_points.split(","))
    return f"""\
server:
  applicationConnectors:
    - type: http
      bindHost: 127.0.0.1
      port: {app}
  adminConnectors:
    - type: http
      bindHost: 127.0.0.1
      port: {admin}
cassandra:
  clusterName: bench
  keyspace: {keyspace}
  contactPoints: [{points}]
  port: {cfg.port}
  queryOptions:
    consistencyLevel: LOCAL_QUORUM
    serialConsistencyLevel: LOCAL_SERIAL
clustering:
  overridePath: {hazelcast}
logging:
  level: WARN
  appenders:
    - type: console
      target: stderr
"""


def _hazelcast(port: int, group: str) -> str:
    return f"""\
<?xml version="1.0" encoding="UTF-8"?>
<hazelcast xmlns="http://www.hazelcast.com/schema/config">
  <group><name>{group}</name><password>{group}</password></group>
  <properties>
    <property name="hazelcast.phone.home.enabled">false</property>
  </properties>
  <network>
    <port auto-increment="false">{port}</port>
    <join>
      <multicast enabled="false"/>
      <tcp-ip enabled="true"><member>127.0.0.1:{port}</member></tcp-ip>
      <aws enabled="false"/>
    </join>
    <interfaces enabled="true"><interface>127.0.0.1</interface></interfaces>
  </network>
</hazelcast>
"""


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM (a server drains and stops), SIGKILL after 40 s; both suite servers stop so."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def request(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, bytes]:
    """One HTTP request on a fresh loopback connection: (status, body). The service suite uses
    it for both servers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class OriginalServer:
    """One original CassieQ server process on loopback (``app_port``: API v1, ``admin_port``:
    its admin API and Dropwizard's admin servlet)."""

    def __init__(self, cfg: BenchConfig, runtime: dict, tmp: Path, keyspace: str):
        create_schema(cfg, keyspace, runtime["schema"])
        self.app_port, self.admin_port = _free_port(), _free_port()
        hz = tmp / "hazelcast.xml"
        hz.write_text(_hazelcast(_free_port(), f"bench-{secrets.token_hex(4)}"))
        conf = tmp / "original.yml"
        conf.write_text(_config(cfg, keyspace, self.app_port, self.admin_port, hz))
        self.log_path = tmp / f"original-{self.app_port}.log"
        argv = [
            "java", "-Xmx512m",
            *(f"--add-opens={o}" for o in OPENS),
            "-Dcom.datastax.driver.FORCE_NIO=true",
            "-Dhazelcast.phone.home.enabled=false",
            "-cp", runtime["class_path"], MAIN, "server", str(conf),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT, cwd=tmp
        )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the original server exited {self.proc.returncode}: {self.log_tail()}"
                )
            try:
                if request(self.admin_port, "GET", "/ping")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"the original server not up in {START_SECONDS:.0f} s: {self.log_tail()}"
        )

    def log_tail(self, n: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def create_account(self, name: str) -> dict[str, str]:
        """A new account through the admin API: its keys (``primary``, ``secondary``)."""
        status, raw = request(
            self.admin_port,
            "POST",
            "/admin/api/v1/accounts",
            json.dumps(name).encode(),
            {"Content-Type": "application/json"},
        )
        if status != 201:
            raise RuntimeError(
                f"the original's admin API: create account {name!r}: {status} {raw!r}"
            )
        return json.loads(raw)["keys"]

    def stop(self) -> None:
        stop_process(self.proc)
