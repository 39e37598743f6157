"""Signed pop receipts came in schema version 12: ``bootstrap`` adds the ``receipt_key`` column
to a keyspace version 11 made, keeping its queues; a queue made before gets its key from the
first reader, one key whoever reads first (also with every compare-and-set reply lost); a
receipt of the unsigned format, as version 11 issued them, is refused with what to do, and its
message comes back when its visibility timeout ends."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from support.schema_versions import keyspace_before

from cassieq_spark import QueueClient
from cassieq_spark.engine.core.receipts import PopReceipt
from cassieq_spark.engine.store import schema
from cassieq_spark.engine.store.schema import RECEIPT_KEY_MIGRATION, SENTINEL_LO
from cassieq_spark.errors import InvalidReceiptError

pytestmark = pytest.mark.integration


def _keyspace_of_version_11(session, keyspace: str) -> None:
    assert keyspace_before(session, keyspace, RECEIPT_KEY_MIGRATION) == 11
    # the rows version 11's create_queue wrote: pointers, counter, and a queue row without key
    qid = uuid.uuid4()
    session.execute(
        f"INSERT INTO {keyspace}.pointers (queue_id, reader, repair, timer_slot) "
        "VALUES (%s, 0, 0, 0) USING TIMESTAMP 1",
        (qid,),
    )
    session.execute(
        f"INSERT INTO {keyspace}.monoton (queue_id, lo, next) VALUES (%s, %s, 0) USING TIMESTAMP 1",
        (qid, SENTINEL_LO),
    )
    session.execute(
        f"INSERT INTO {keyspace}.queues (name, queue_id, bucket_size, max_delivery_count, "
        "visibility_timeout, repair_timeout, max_payload_bytes, created_at) "
        "VALUES ('kept', %s, 10, 5, 30, 15, 1048576, toTimestamp(now()))",
        (qid,),
    )


def _unsigned(receipt: str) -> str:
    """The receipt version 11 issued for the same delivery: the ids without the tag."""
    raw = base64.urlsafe_b64decode(receipt[2:] + "=" * (-len(receipt[2:]) % 4))
    return "r1" + base64.urlsafe_b64encode(raw[:28]).decode().rstrip("=")


# With every compare-and-set reply lost: the first reader's key write is settled by reading back.
@pytest.mark.parametrize("fault_mode", ["lost-reply"], indirect=True)
@pytest.mark.usefixtures("fault_mode")
def test_bootstrap_migrates_version_11_and_old_receipts_are_refused_until_redelivery(
    cassandra, keyspace
):
    session = cassandra.session()
    _keyspace_of_version_11(session, keyspace)
    opts = {
        "contactPoints": ",".join(cassandra.contact_points),
        "port": str(cassandra.port),
        "keyspace": keyspace,
    }
    with QueueClient.from_options(opts) as early, pytest.raises(Exception, match="bootstrap"):
        early.put("kept", b"x")
    with QueueClient.from_options(opts) as client, QueueClient.from_options(opts) as other:
        assert client.bootstrap() == schema.SCHEMA_VERSION == 12
        assert client.bootstrap() == schema.SCHEMA_VERSION  # idempotent
        [listed] = client.list_queues()
        assert listed.name == "kept" and listed.receipt_key is None  # not keyed yet
        key = client.get_queue("kept").receipt_key
        assert key and other.get_queue("kept").receipt_key == key  # one key for every reader
        client.put("kept", b"x")
        m = client.get("kept", visibility_timeout=1)
        assert m is not None and m.pop_receipt.startswith("r2")
        # the same delivery as a receipt of the unsigned format (version 11's)
        old = _unsigned(m.pop_receipt)
        with pytest.raises(InvalidReceiptError, match="before receipts were signed"):
            other.ack("kept", old)
        assert [r.status for r in other.ack_many("kept", [old])] == ["invalid"]
        # its message comes back when its visibility timeout ends, and acks with the new receipt
        time.sleep(1.2)
        again = other.get_many("kept", 1, wait_seconds=5)
        assert [x.id for x in again] == [m.id] and again[0].delivery_count == 2
        assert other.ack("kept", again[0].pop_receipt)
        assert PopReceipt.decode(again[0].pop_receipt).version == 2
    session.cluster.refresh_schema_metadata()
    assert "receipt_key" in session.cluster.metadata.keyspaces[keyspace].tables["queues"].columns
    assert schema.current_version(session, keyspace) == schema.SCHEMA_VERSION
