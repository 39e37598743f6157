"""``create_queue(exist_ok=True)`` of a queue that exists reads it and writes nothing.

A sink with ``createQueue=true`` asks for its queue on every micro-batch (and each routed task
for each of its queues). It used to write the rows of a fresh incarnation, lose the
compare-and-set on the queue row and delete them again: a Paxos round, four writes and two
partition tombstones per batch (protocol review 2, G12). Real Cassandra; statements counted by
their CQL through the connection.
"""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|BEGIN)", re.IGNORECASE)


def _text(statement) -> str:
    if isinstance(statement, str):
        return statement
    statement = getattr(statement, "prepared_statement", statement)
    return getattr(statement, "query_string", "") or ""


def test_create_queue_of_an_existing_queue_writes_nothing(queue_client, queue_name, monkeypatch):
    q = queue_client
    made = q.create_queue(queue_name, bucket_size=50)
    conn = q.conn
    sent: list[str] = []
    for name in ("execute", "execute_async", "cas"):
        original = getattr(conn, name)

        def recorded(statement, *a, _original=original, **kw):
            sent.append(_text(statement))
            return _original(statement, *a, **kw)

        monkeypatch.setattr(conn, name, recorded)
    again = q.create_queue(queue_name, exist_ok=True, bucket_size=50)
    monkeypatch.undo()
    assert again.queue_id == made.queue_id
    writes = [cql for cql in sent if WRITE.match(cql)]
    assert writes == [], writes
    q.put(queue_name, b"x")  # and the queue works as before
    assert q.get(queue_name).payload == b"x"
