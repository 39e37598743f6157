"""QueueRetryPolicy: which refusals the driver may answer by sending a statement again.

Cassandra 5.0 raises Unavailable and Overloaded for a compare-and-set also *after* its
proposal was accepted (the commit's replica plan, the hint check in the commit loop). The
accepted proposal is then completed by the next round on the partition, so a re-sent copy
finds its own write and reports "not applied". Only statements safe to apply twice may be
re-sent; the others reach ``Connection.cas``, which settles them by reading.
"""

from __future__ import annotations

import pytest
from cassandra.policies import RetryPolicy, WriteType
from cassandra.protocol import OverloadedErrorMessage

from cassieq_spark.engine.store.retries import QueueRetryPolicy


class _Stmt:
    def __init__(self, idempotent: bool):
        self.is_idempotent = idempotent


POLICY = QueueRetryPolicy()


@pytest.mark.parametrize("idempotent", [False, True], ids=["conditional", "idempotent"])
def test_unavailable_is_resent_only_for_statements_safe_to_apply_twice(idempotent):
    """G6: a conditional statement refused as Unavailable may have been accepted already."""
    decision = POLICY.on_unavailable(_Stmt(idempotent), 6, 2, 1, 0)[0]
    assert decision == (RetryPolicy.RETRY_NEXT_HOST if idempotent else RetryPolicy.RETHROW)
    assert POLICY.on_unavailable(_Stmt(idempotent), 6, 2, 1, 1)[0] == RetryPolicy.RETHROW


@pytest.mark.parametrize("idempotent", [False, True], ids=["conditional", "idempotent"])
def test_overloaded_is_resent_only_for_statements_safe_to_apply_twice(idempotent):
    """G6: Overloaded is also raised in the commit loop of an accepted proposal."""
    error = OverloadedErrorMessage(0x1001, "overloaded", None)
    decision = POLICY.on_request_error(_Stmt(idempotent), 6, error, 0)[0]
    assert decision == (RetryPolicy.RETRY_NEXT_HOST if idempotent else RetryPolicy.RETHROW)


def test_a_conditional_write_timeout_is_never_resent():
    assert (
        POLICY.on_write_timeout(_Stmt(False), 6, WriteType.CAS, 2, 0, 0)[0] == RetryPolicy.RETHROW
    )
    assert (
        POLICY.on_write_timeout(_Stmt(True), 6, WriteType.SIMPLE, 2, 0, 0)[0] == RetryPolicy.RETRY
    )


@pytest.mark.parametrize("idempotent", [False, True], ids=["conditional", "idempotent"])
def test_a_node_shutting_down_sends_any_statement_to_the_next_node(idempotent):
    """Cassandra's dispatcher refuses a request on a node whose transport shuts down before it
    runs anything: even a compare-and-set or a counter update may go to the next node, up to
    three nodes in all; then the error reaches the connection (which sends it again later)."""
    error = OverloadedErrorMessage(0x1001, "Server is shutting down", None)
    for retry_num in (0, 1):
        decision = POLICY.on_request_error(_Stmt(idempotent), 6, error, retry_num)[0]
        assert decision == RetryPolicy.RETRY_NEXT_HOST
    assert POLICY.on_request_error(_Stmt(idempotent), 6, error, 2)[0] == RetryPolicy.RETHROW


@pytest.mark.parametrize("idempotent", [False, True], ids=["conditional", "idempotent"])
def test_a_read_that_timed_out_is_asked_once_more(idempotent):
    """A read changes nothing, so its coordinator may be asked again, once, at the same level;
    a compare-and-set that timed out reading its row is settled by reading, never re-sent."""
    decision = POLICY.on_read_timeout(_Stmt(idempotent), 4, 2, 1, False, 0)
    assert decision == ((RetryPolicy.RETRY, 4) if idempotent else (RetryPolicy.RETHROW, None))
    assert POLICY.on_read_timeout(_Stmt(idempotent), 4, 2, 1, False, 1)[0] == RetryPolicy.RETHROW
