"""Several processes may bootstrap one keyspace at once (service instances started with
``--bootstrap``, test workers sharing a keyspace). The recorded schema version never moves
back: a process that read an older version and records its later steps after another
finished must not make the keyspace look un-bootstrapped to everyone else."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import schema

pytestmark = pytest.mark.integration


def test_a_late_step_of_a_slower_bootstrap_does_not_move_the_version_back(cassandra, keyspace):
    """The interleaving that made clients refuse a bootstrapped keyspace: one bootstrap
    finished (version at the newest), then a slower one, which had read an older version,
    recorded one of its later steps."""
    session = cassandra.session()
    assert schema.bootstrap(session, keyspace) == schema.SCHEMA_VERSION
    schema.record_version(session, keyspace, schema.SCHEMA_VERSION - 3)
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
    schema.record_version(session, keyspace, schema.SCHEMA_VERSION + 1)  # a newer step counts
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION + 1


def test_the_first_record_of_a_fresh_keyspace_is_written(cassandra, keyspace):
    session = cassandra.session()
    for statement in schema.MIGRATIONS[1]:
        session.execute(statement.replace("{ks}.", f"{keyspace}."))
    assert schema.current_version(session, keyspace) == 0
    schema.record_version(session, keyspace, 1)
    assert schema.current_version(session, keyspace) == 1


def _bootstrap_and_use(options: dict[str, str], ready, out) -> None:
    """Bootstrap when every process has connected, then use the keyspace for 3 s: each
    refusal is reported."""
    refusals: list[str] = []
    with QueueClient.from_options(options) as client:
        ready.wait(60)
        client.bootstrap(create_keyspace=True)
        queue = f"q{uuid.uuid4().hex[:8]}"
        until = time.time() + 3.0
        while time.time() < until:
            try:
                client.create_queue(queue, exist_ok=True)
                client.stats(queue)
            except Exception as exc:  # the test fails on any; it records which
                refusals.append(f"{type(exc).__name__}: {exc}"[:200])
            time.sleep(0.05)
    out.put(refusals)


def test_processes_bootstrapping_one_fresh_keyspace_at_once_can_each_use_it_at_once(
    cassandra, cassieq_options
):
    """Counted: every check each process makes after its own bootstrap returned succeeds."""
    keyspace = f"cq_boot_{uuid.uuid4().hex[:10]}"
    options = {**cassieq_options, "keyspace": keyspace}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ready = ctx.Barrier(3)
    procs = [ctx.Process(target=_bootstrap_and_use, args=(options, ready, out)) for _ in range(3)]
    try:
        for p in procs:
            p.start()
        refusals = [r for _ in procs for r in out.get(timeout=120)]
        for p in procs:
            p.join(30)
        assert refusals == [], f"{len(refusals)} refusals after bootstrap: {refusals[:3]}"
        session = cassandra.session()
        assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
