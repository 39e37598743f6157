"""The Cassandra under test is a real 5.0 server with working lightweight transactions."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import CassandraEndpoint


def test_release_version_is_5_0(cassandra: CassandraEndpoint) -> None:
    row = cassandra.session().execute("SELECT release_version FROM system.local").one()
    assert row.release_version.startswith("5.0"), row.release_version


def test_lwt_insert_if_not_exists_applies_once(cassandra: CassandraEndpoint, keyspace: str) -> None:
    session = cassandra.session()
    session.execute(f"CREATE TABLE {keyspace}.claims (id text PRIMARY KEY, owner text)")
    insert = session.prepare(
        f"INSERT INTO {keyspace}.claims (id, owner) VALUES (?, ?) IF NOT EXISTS"
    )

    first = session.execute(insert, ("msg-1", "consumer-a"))
    assert first.was_applied

    second = session.execute(insert, ("msg-1", "consumer-b"))
    assert not second.was_applied
    assert second.one().owner == "consumer-a"  # the losing insert sees the winner's row

    row = session.execute(f"SELECT owner FROM {keyspace}.claims WHERE id = 'msg-1'").one()
    assert row.owner == "consumer-a"
