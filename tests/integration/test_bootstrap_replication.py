"""Bootstrap never leaves a keyspace half-made (finding C87 of the bad-input sweep): a
replication factor the cluster cannot serve is refused before anything is created, a keyspace
an earlier bootstrap left half-made is completed, and a keyspace whose replication the cluster
cannot serve (or differs from the one asked for) gets a message that says how to change it."""

from __future__ import annotations

import uuid

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine.store import schema
from cassieq_spark.errors import KeyspaceReplicationError

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh(cassandra, cassieq_options):
    """A keyspace name not in use; dropped at the end if anything created it."""
    name = f"bi_boot_{uuid.uuid4().hex[:8]}"
    client = QueueClient.from_options({**cassieq_options, "keyspace": name})
    try:
        yield name, client
    finally:
        client.close()
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)


def _exists(cassandra, name: str) -> bool:
    return (
        cassandra.session()
        .execute(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", (name,)
        )
        .one()
        is not None
    )


def _half_made(cassandra, name: str, rf: int) -> None:
    """What the failed bootstrap of C87 left: every table of version 1, no recorded version."""
    s = cassandra.session()
    s.execute(
        f"CREATE KEYSPACE {name} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}",
        timeout=60,
    )
    for statement in schema.MIGRATIONS[1]:
        s.execute(statement.replace("{ks}.", f"{name}."), timeout=60)
    s.cluster.control_connection.wait_for_schema_agreement()


def test_unservable_replication_factor_creates_nothing(fresh, cassandra):
    name, client = fresh
    with pytest.raises(
        KeyspaceReplicationError, match=r"replication factor 3 needs 3 nodes .*nothing was created"
    ):
        client.bootstrap(create_keyspace=True, replication_factor=3)
    assert not _exists(cassandra, name)
    assert client.bootstrap(create_keyspace=True) == schema.SCHEMA_VERSION  # the default: 1


def test_half_made_keyspace_is_completed(fresh, cassandra):
    name, client = fresh
    _half_made(cassandra, name, 1)
    assert schema.current_version(client.conn.session, name) == 0
    assert client.bootstrap() == schema.SCHEMA_VERSION
    assert schema.current_version(client.conn.session, name) == schema.SCHEMA_VERSION
    client.create_queue("q")
    client.put("q", b"x")
    assert client.get("q").payload == b"x"


def test_keyspace_the_cluster_cannot_serve_says_how_to_fix_it(fresh, cassandra):
    name, client = fresh
    _half_made(cassandra, name, 3)
    client.conn.cluster.refresh_schema_metadata()
    alter = rf"ALTER KEYSPACE {name} WITH replication = \{{'class': 'SimpleStrategy', 'replication_factor': 1\}}"
    with pytest.raises(
        KeyspaceReplicationError, match=r"cannot serve: replication factor 3 .*" + alter
    ):
        client.bootstrap()
    with pytest.raises(KeyspaceReplicationError, match=r"which the cluster cannot serve"):
        client.create_queue("q")  # not the driver's NoHostAvailable
    # asking for another factor is refused too: bootstrap never changes replication
    with pytest.raises(
        KeyspaceReplicationError,
        match=r"exists with replication .* not the replication factor 1 asked for",
    ):
        client.bootstrap(create_keyspace=True, replication_factor=1)
    cassandra.session().execute(
        f"ALTER KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}",
        timeout=60,
    )
    client.conn.cluster.refresh_schema_metadata()
    assert client.bootstrap(create_keyspace=True) == schema.SCHEMA_VERSION
    client.create_queue("q")


# -- a whole replication map (--replication) -------------------------------------------------------


def _strategy(cassandra, name: str) -> dict[str, str]:
    row = (
        cassandra.session()
        .execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (name,)
        )
        .one()
    )
    return dict(row.replication)


def test_network_topology_replication_map_creates_the_keyspace(fresh, cassandra):
    name, client = fresh
    dc = next(iter(client.conn.cluster.metadata.all_hosts())).datacenter
    version = client.bootstrap(
        create_keyspace=True, replication=f'{{"class": "NetworkTopologyStrategy", "{dc}": 1}}'
    )
    assert version == schema.SCHEMA_VERSION
    got = _strategy(cassandra, name)
    assert got["class"].endswith("NetworkTopologyStrategy") and got[dc] == "1", got
    client.create_queue("q")
    client.put("q", b"x")
    assert client.get("q").payload == b"x"
    # the same map again is fine; another one is refused with the ALTER that would change it
    assert client.bootstrap(
        create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 1}
    )
    with pytest.raises(
        KeyspaceReplicationError,
        match=rf"exists with replication .*'{dc}': 1.* not .*'{dc}': 2.* asked for.*"
        rf"ALTER KEYSPACE {name} WITH replication = .*NetworkTopologyStrategy",
    ):
        client.bootstrap(
            create_keyspace=True, replication={"class": "NetworkTopologyStrategy", dc: 2}
        )


def test_replication_map_naming_an_unknown_data_center_creates_nothing(fresh, cassandra):
    name, client = fresh
    with pytest.raises(
        KeyspaceReplicationError,
        match=r"replication factor 3 needs 3 nodes in data center 'dc-nowhere' .* it has 0 "
        r".*nothing was created.*--replication",
    ):
        client.bootstrap(
            create_keyspace=True,
            replication={"class": "NetworkTopologyStrategy", "dc-nowhere": 3},
        )
    assert not _exists(cassandra, name)


def test_cli_bootstrap_with_a_replication_map(fresh, cassandra, cassieq_options):
    import json
    import subprocess
    import sys

    name, client = fresh
    dc = next(iter(client.conn.cluster.metadata.all_hosts())).datacenter
    base = [sys.executable, "-m", "cassieq_spark", "--contact-points",
            cassieq_options["contactPoints"], "--port", cassieq_options["port"],
            "--keyspace", name, "bootstrap", "--create-keyspace", "--replication"]  # fmt: skip
    run = subprocess.run(
        [*base, json.dumps({"class": "NetworkTopologyStrategy", dc: 1})],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["schema_version"] == schema.SCHEMA_VERSION
    assert _strategy(cassandra, name)[dc] == "1"
    bad = subprocess.run([*base, "{'class': 3}"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "replication must be a JSON object" in bad.stderr
    assert "Traceback" not in bad.stderr
