"""Fixtures every tier shares (loaded by tests/conftest.py as a plugin): one bootstrapped keyspace
per test session (schema changes take seconds each), a fresh queue name per test, the shared
3-node cluster, a SparkSession with the source registered, the ``cassieq`` command, drivers of a
streaming query, and the fault mode of the engine contract tests.

Fault modes. An engine contract test states ``pytest.mark.usefixtures("fault_mode")``; it then
runs once per mode of :data:`FAULT_MODES`: ``none``, and ``lost-reply``, where every
compare-and-set applies and its caller gets a timeout instead of the reply
(``engine/store/faults.py``; ``CASSIEQ_FAULTS=lost-reply``, so the processes the test starts are
disturbed too). Callers must then settle each outcome by reading, as after a coordinator timeout
in production. A test that uses Spark (``spark``/``sspark``) runs once, without injected faults:
Spark's Python workers do not see a mode set after the session started, and every
compare-and-set lives in the engine.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import faults
from support.cluster_faults import (
    CLUSTER_NODES,
    CLUSTER_PORT,
    CLUSTER_STORAGE_PORT,
    Faults,
    durable_cluster,
    faults_on,
)
from support.driver import Driver
from support.service_harness import Server, start_test_server

TEST_KEYSPACE = "cassieq_test"
FAULT_MODES = ("none", "lost-reply")
SPARK_FIXTURES = frozenset({"spark", "sspark"})
CONSOLE_SCRIPT = Path(sys.executable).parent / "cassieq"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test using ``fault_mode`` runs once per mode; with Spark only without faults. A test
    that cannot run under a mode names the ones it runs under itself:
    ``@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)``."""
    names = set(metafunc.fixturenames)
    chosen = any("fault_mode" in m.args[0] for m in metafunc.definition.iter_markers("parametrize"))
    if "fault_mode" in names and not names & SPARK_FIXTURES and not chosen:
        metafunc.parametrize("fault_mode", FAULT_MODES, indirect=True)


@pytest.fixture
def fault_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """The fault mode this test runs under (see the module docstring); ``none`` unless the test
    was parametrized with another."""
    mode = getattr(request, "param", "none")
    before = os.environ.pop(faults.ENV, None)
    if mode != "none":
        os.environ[faults.ENV] = mode
    faults.reset()  # reads the variable: every conditional statement of this process disturbed
    try:
        yield mode
    finally:
        os.environ.pop(faults.ENV, None)
        if before is not None:
            os.environ[faults.ENV] = before
        faults.reset()


@pytest.fixture(scope="session")
def cassieq_options(cassandra) -> dict[str, str]:
    """Spark-style connection options for the Cassandra under test (also for subprocesses)."""
    return {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": TEST_KEYSPACE,
    }


@pytest.fixture(scope="session")
def queue_client(cassieq_options) -> Iterator[QueueClient]:
    client = QueueClient.from_options(cassieq_options)
    client.bootstrap(create_keyspace=True)
    yield client
    client.close()


@pytest.fixture
def queue_name(queue_client) -> str:
    """A unique queue name; the queue itself is not created (tests choose its settings)."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def own_keyspace_client(cassandra, cassieq_options):
    """A client of a fresh keyspace of its own (dropped at the end), so that whole tables can be
    counted."""
    ks = f"cq_growth_{uuid.uuid4().hex[:10]}"
    client = QueueClient.from_options({**cassieq_options, "keyspace": ks})
    client.bootstrap(create_keyspace=True)
    try:
        yield client
    finally:
        client.conn.session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
        client.close()


@pytest.fixture(scope="session")
def cluster3() -> Iterator[Faults]:
    """A durable 3-node Cassandra on 127.0.0.1-3 (CQL 19042), shared by the cluster tests
    (starting one takes a minute or two), with the fault harness on it."""
    cluster = durable_cluster(CLUSTER_NODES, CLUSTER_PORT, CLUSTER_STORAGE_PORT, "cluster")
    with faults_on(cluster) as faults:  # stops only the nodes this session started
        yield faults


@pytest.fixture(scope="module")
def sspark(spark):
    """The shared local SparkSession with the cassieq data source registered."""
    from cassieq_spark.spark import register

    register(spark)
    return spark


@pytest.fixture
def run(cassieq_options, queue_client):
    """``run(*args)``: the ``cassieq`` command (or ``python -m cassieq_spark`` with
    ``module=True``) against the test keyspace, configured through its environment variables."""
    env = {
        **os.environ,
        "CASSIEQ_CONTACT_POINTS": cassieq_options["contactPoints"],
        "CASSIEQ_PORT": cassieq_options["port"],
        "CASSIEQ_KEYSPACE": cassieq_options["keyspace"],
    }

    def _run(*args, env_extra=None, module=False, stdin=None):
        cmd = [sys.executable, "-m", "cassieq_spark"] if module else [str(CONSOLE_SCRIPT)]
        return subprocess.run(
            [*cmd, *args],
            env={**env, **(env_extra or {})},
            capture_output=True,
            text=True,
            input=stdin,
            timeout=120,
        )

    return _run


@pytest.fixture
def drivers(queue_client, cassieq_options):
    """``drivers(queue, **options)``: a :class:`~support.driver.Driver` on ``queue``, stopped
    at the end of the test."""
    made: list[Driver] = []

    def make(queue: str, **extra) -> Driver:
        d = Driver({**cassieq_options, "queue": queue}, **extra)
        made.append(d)
        return d

    yield make
    for d in made:
        d.reader.stop()


@pytest.fixture
def query_drivers(cassieq_options):
    """``query_drivers(**options)``: a :class:`~support.driver.Driver` with the connection and
    the options given (``queues``, ``queuePattern``, ...), stopped at the end of the test."""
    made: list[Driver] = []

    def make(**options) -> Driver:
        d = Driver(dict(cassieq_options), **options)
        made.append(d)
        return d

    yield make
    for d in made:
        d.reader.stop()


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: what is released must be released without it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def own_client(cassieq_options, queue_client) -> Iterator[QueueClient]:
    """A second :class:`QueueClient` (its own releaser thread), closed at the end of the test;
    ``queue_client`` stays the observer."""
    client = QueueClient.from_options(cassieq_options)
    yield client
    client.close()


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, tmp_path_factory) -> Iterator[Server]:
    """``cassieq serve`` on the test keyspace (bootstrapped by ``queue_client``), one a test
    module, stopped after the module's last test. A module that needs other server options
    defines its own ``server`` fixture, which takes precedence."""
    s = start_test_server(tmp_path_factory.mktemp("service"), cassandra, cassieq_options)
    yield s
    s.stop()
