"""Batches of plain rows encoded by the write path (``encode_plain_rows``) are the bytes the
driver sends for the same rows bound value by value, in batches of one bucket within the plain rows' limits; a
session without cassieq's encoding handler refuses them instead of sending something else."""

from __future__ import annotations

import os
import struct
import uuid
from itertools import pairwise

import pytest
from cassandra import ConsistencyLevel
from cassandra.protocol import BatchMessage, ProtocolHandler
from cassandra.query import UNSET_VALUE, BatchType

from cassieq_spark.engine.core.messages import (
    PLAIN_BATCH_MAX_BYTES,
    PLAIN_BATCH_MAX_ROWS,
    ROW_OVERHEAD_BYTES,
    encode_plain_rows,
)
from cassieq_spark.engine.store.session import EncodedStatements, encoding_handler

QUERY_ID = bytes(range(16))
QUEUE_ID = uuid.UUID("6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5").bytes
NOW = struct.pack(">q", 1_790_000_000_123)
TTL = struct.pack(">i", 1_209_600)


def _payloads(sizes):
    return [os.urandom(s) for s in sizes]


def _driver_bytes(bucket: int, first: int, payloads, protocol_version: int) -> bytes:
    """The driver's own encoding of the rows, one value list per row."""
    queries = [
        (
            True,
            QUERY_ID,
            [
                QUEUE_ID,
                struct.pack(">q", bucket),
                struct.pack(">q", first + i),
                p,
                UNSET_VALUE,
                UNSET_VALUE,
                NOW,
                UNSET_VALUE,
                TTL,
            ],
        )
        for i, p in enumerate(payloads)
    ]
    msg = BatchMessage(BatchType.UNLOGGED, queries, ConsistencyLevel.LOCAL_QUORUM, None, 42, None)
    return ProtocolHandler.encode_message(msg, 7, protocol_version, None, False)


@pytest.mark.parametrize("protocol_version", [4, 5])
@pytest.mark.parametrize(
    "sizes, bucket_size",
    [
        ([100] * 600, 1000),  # cut by row count
        ([1024] * 300, 1000),  # cut by bytes
        ([10] * 50, 16),  # cut by buckets
        ([0, 1, 200_000, 5, 128 * 1024], 1000),  # an empty payload, rows alone past the limit
    ],
    ids=["rows", "bytes", "buckets", "odd-sizes"],
)
def test_encoded_batches_are_the_drivers_bytes(sizes, bucket_size, protocol_version):
    first = 1_000_003
    payloads = _payloads(sizes)
    handler = encoding_handler(ProtocolHandler)
    batches = list(encode_plain_rows(QUERY_ID, QUEUE_ID, first, payloads, bucket_size, NOW, TTL))
    assert [b.lo for b in batches][0] == 0 and batches[-1].hi == len(payloads)
    for prev, nxt in pairwise(batches):
        assert prev.hi == nxt.lo  # every row once, in order
    for b in batches:
        rows = payloads[b.lo : b.hi]
        ids = range(first + b.lo, first + b.hi)
        assert {i // bucket_size for i in ids} == {b.bucket}
        cost = sum(len(p) + ROW_OVERHEAD_BYTES for p in rows)
        assert b.nbytes == cost
        assert len(rows) <= PLAIN_BATCH_MAX_ROWS
        assert cost <= PLAIN_BATCH_MAX_BYTES or len(rows) == 1
        ours = BatchMessage(
            BatchType.UNLOGGED, b.statements, ConsistencyLevel.LOCAL_QUORUM, None, 42, None
        )
        assert handler.encode_message(ours, 7, protocol_version, None, False) == _driver_bytes(
            b.bucket, first + b.lo, rows, protocol_version
        )


def test_batches_are_as_full_as_the_limits_allow():
    """A batch ends only where the next row would pass a limit or the bucket ends."""
    payloads = _payloads([100] * 1000 + [1024] * 600)
    batches = list(encode_plain_rows(QUERY_ID, QUEUE_ID, 0, payloads, 100_000, NOW, TTL))
    for b, nxt in pairwise(batches):
        full = b.hi - b.lo == PLAIN_BATCH_MAX_ROWS
        assert full or b.nbytes + len(payloads[nxt.lo]) + ROW_OVERHEAD_BYTES > PLAIN_BATCH_MAX_BYTES


def test_a_plain_session_refuses_encoded_statements():
    msg = BatchMessage(
        BatchType.UNLOGGED,
        EncodedStatements(1, b"\x00"),
        ConsistencyLevel.LOCAL_QUORUM,
        None,
        42,
        None,
    )
    with pytest.raises(TypeError, match="encoding handler"):
        ProtocolHandler.encode_message(msg, 7, 4, None, False)
