"""Shared pytest fixtures: the Cassandra under test, a local Spark session, a fresh keyspace.

``CASSIEQ_TEST_CASSANDRA`` chooses the Cassandra:

- ``external://host[,host...]:port`` - an existing cluster (e.g. ``external://127.0.0.1:9042``);
- ``docker`` - a ``cassandra:5.0`` container through testcontainers;
- ``auto`` (default) - docker if an engine answers and the image is cached, else the Cassandra 5.x
  already answering on 127.0.0.1:9042 (left running), else the local launcher
  (``cassieq_dev.local_cassandra``), on the next free port if 9042 is held by something else,
  stopped at the end only if this session started it. What was chosen is one line on the
  terminal; a failure is one line (``DEBUG=1`` for the traceback).

The tier of a test is the directory it lives in (tests/unit, tests/integration, tests/system,
tests/long: the marker of the same name is added here); docs/testing.md lists what each tier holds
and its time budget. The fixtures every tier shares (queues, Spark, the 3-node cluster, the fault
mode of the engine contract) are in ``tests/support/fixtures.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

from cassieq_dev.local_cassandra import (
    DEFAULT_PORT,
    ensure_cassandra,
    failure_line,
)
from cassieq_dev.local_cassandra.cli import debug

log = logging.getLogger(__name__)

TESTS_DIR = Path(__file__).resolve().parent
DOCKER_IMAGE = "cassandra:5.0"
DIRECTORY_MARKERS = {d: d for d in ("unit", "integration", "system", "long")}

pytest_plugins = ["support.fixtures"]


@dataclass
class CassandraEndpoint:
    """Where the Cassandra under test listens, plus a cached driver session."""

    contact_points: list[str]
    port: int
    kind: str
    _clusters: list[Cluster] = field(default_factory=list, repr=False)
    _session: Session | None = field(default=None, repr=False)

    def connect(self, keyspace: str | None = None, **cluster_kwargs: Any) -> Session:
        """A new driver Session (closed with the fixture); kwargs go to ``Cluster``."""
        cluster_kwargs.setdefault("protocol_version", 5)
        if "load_balancing_policy" not in cluster_kwargs:
            cluster_kwargs.setdefault(
                "execution_profiles",
                {
                    EXEC_PROFILE_DEFAULT: ExecutionProfile(
                        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy())
                    )
                },
            )
        cluster = Cluster(self.contact_points, port=self.port, **cluster_kwargs)
        self._clusters.append(cluster)
        return cluster.connect(keyspace)

    def session(self) -> Session:
        """A shared Session for the whole test session."""
        if self._session is None:
            self._session = self.connect()
        return self._session

    def close(self) -> None:
        for cluster in self._clusters:
            cluster.shutdown()
        self._clusters.clear()
        self._session = None


def _parse_external(spec: str) -> tuple[list[str], int]:
    hosts, _, port = spec.removeprefix("external://").rpartition(":")
    if not hosts or not port.isdigit():
        raise pytest.UsageError(
            f"CASSIEQ_TEST_CASSANDRA={spec!r}: expected external://host[,host...]:port"
        )
    return [h.strip() for h in hosts.split(",") if h.strip()], int(port)


def _docker_usable() -> bool:
    """True if a Docker engine answers and the Cassandra image is already present."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.images.get(DOCKER_IMAGE)
        return True
    except Exception as exc:  # no engine, no image, no SDK: all mean "not usable"
        log.info("docker not usable for tests: %s", exc)
        return False


@contextmanager
def _docker_endpoint() -> Iterator[CassandraEndpoint]:
    from testcontainers.community.cassandra import CassandraContainer

    with CassandraContainer(DOCKER_IMAGE) as container:
        points = container.get_contact_points()
        yield CassandraEndpoint([h for h, _ in points], points[0][1], "docker")


def _say(config: pytest.Config) -> Callable[[str], None]:
    """Write one line to the terminal, even from inside a captured fixture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        log.warning("%s", line)
        if reporter is None:
            return
        with capture.global_and_fixture_disabled() if capture else nullcontext():
            reporter.write_line(f"cassandra: {line}")

    return say


@contextmanager
def _local_endpoint(config: pytest.Config) -> Iterator[CassandraEndpoint]:
    """The Cassandra on 127.0.0.1:$CASSANDRA_PORT (9042) if it is a 5.x, else the embedded one (on
    a free port if that one is taken by something else); stops at the end only what it started."""
    try:
        # A node the harness starts is thrown away after the run: it skips syncing its
        # commitlog (durable=False); tests of durability start durable nodes of their own.
        found = ensure_cassandra(
            int(os.environ.get("CASSANDRA_PORT", DEFAULT_PORT)), say=_say(config), durable=False
        )
    except Exception as exc:  # one line, not a traceback per test (DEBUG=1 shows it)
        if debug():
            raise
        pytest.exit(failure_line("the tests' Cassandra", exc), returncode=3)
    try:
        kind = "external" if found.external else "local"
        yield CassandraEndpoint(found.contact_points, found.port, kind)
    finally:
        found.stop_started()


SHARED_NODE = pytest.StashKey[Any]()


def _xdist_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to pytest-xdist workers (``-n N``, N > 0)."""
    workers = getattr(config.option, "numprocesses", None)
    return bool(workers) and "PYTEST_XDIST_WORKER" not in os.environ


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, find or start the one Cassandra node every worker shares.

    Without this each worker would run the ``auto`` choice on its own, and two workers could
    start two launchers on one data directory. The controller decides once, before the workers
    are spawned, and hands them the result as ``CASSIEQ_TEST_CASSANDRA=external://...`` (the
    workers inherit its environment); it stops at the end only a node it started. Tests stay
    independent of each other on the shared node: each takes a fresh keyspace and free ports.
    """
    mode = os.environ.get("CASSIEQ_TEST_CASSANDRA", "auto").strip() or "auto"
    if not _xdist_controller(config) or mode != "auto" or _docker_usable():
        return
    try:
        found = ensure_cassandra(
            int(os.environ.get("CASSANDRA_PORT", DEFAULT_PORT)), say=_say(config), durable=False
        )
    except Exception as exc:  # one line, as in _local_endpoint
        if debug():
            raise
        pytest.exit(failure_line("the tests' Cassandra", exc), returncode=3)
    config.stash[SHARED_NODE] = found
    os.environ["CASSIEQ_TEST_CASSANDRA"] = (
        f"external://{','.join(found.contact_points)}:{found.port}"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    found = config.stash.get(SHARED_NODE, None)
    if found is not None:
        found.stop_started()


@pytest.fixture(scope="session")
def cassandra(pytestconfig: pytest.Config) -> Iterator[CassandraEndpoint]:
    """The Cassandra under test (see the module docstring for CASSIEQ_TEST_CASSANDRA)."""
    mode = os.environ.get("CASSIEQ_TEST_CASSANDRA", "auto").strip() or "auto"
    factory: Callable[[], AbstractContextManager[CassandraEndpoint]]
    if mode.startswith("external://"):
        hosts, port = _parse_external(mode)
        factory = partial(nullcontext, CassandraEndpoint(hosts, port, "external"))
    elif mode == "docker":
        factory = _docker_endpoint
    elif mode == "auto":
        factory = _docker_endpoint if _docker_usable() else partial(_local_endpoint, pytestconfig)
    else:
        raise pytest.UsageError(
            f"CASSIEQ_TEST_CASSANDRA={mode!r}: use auto, docker or external://host:port"
        )
    with factory() as endpoint:
        try:
            yield endpoint
        finally:
            endpoint.close()


@pytest.fixture
def keyspace(cassandra: CassandraEndpoint) -> Iterator[str]:
    """A fresh keyspace (SimpleStrategy, RF 1), dropped after the test."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    session = cassandra.session()
    session.execute(
        f"CREATE KEYSPACE {name} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    try:
        yield name
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {name}")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the UI off and 2 shuffle partitions."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("cassieq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # A Python worker started on a loaded 2-core machine (load 20-25 with clusters and
        # other work) took over the default 15 s to connect back and failed a streaming query.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier: the directory under tests/ it lives in.

    A test that already carries a tier marker keeps its own.
    """
    for item in items:
        if any(item.get_closest_marker(m) for m in DIRECTORY_MARKERS.values()):
            continue
        try:
            top = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        except (ValueError, IndexError):
            continue
        marker = DIRECTORY_MARKERS.get(top)
        if marker:
            item.add_marker(getattr(pytest.mark, marker))
