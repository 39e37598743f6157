"""What the driver may send again, and when: the queue's retry policy.

A statement applied twice must do no harm, so only idempotent ones are re-sent; compare-and-sets
whose reply is lost are settled by reading (``Connection.cas``), counter updates never repeated.
"""

from __future__ import annotations

import re

from cassandra.policies import RetryPolicy, WriteType

from . import faults
from .failures import is_shutdown_refusal

_COUNTER_UPDATE = re.compile(r"\bSET\s+(\w+)\s*=\s*\1\s*[+-]", re.IGNORECASE)


def is_idempotent(cql: str) -> bool:
    """Safe to send twice: not a compare-and-set, not a counter update."""
    return not faults.is_conditional(cql) and not _COUNTER_UPDATE.search(cql)


class QueueRetryPolicy(RetryPolicy):
    """Re-send only what is safe to apply twice.

    The driver's default policy re-sends any statement to the next host after a connection
    error, an Unavailable or an overloaded coordinator, conditional ones included: a
    compare-and-set that applied and is sent again reports "not applied" and its caller takes
    its own success for someone else's. Here only statements marked idempotent are re-sent; a
    compare-and-set whose outcome is unknown (a timeout, a lost connection, Unavailable or
    Overloaded) is settled by a SERIAL read of its row (:meth:`Connection.cas`).
    """

    def on_read_timeout(
        self, query, consistency, required_responses, received_responses, data_retrieved, retry_num
    ):
        # A read changes nothing: the coordinator is asked once more. A replica just back from
        # a network cut is marked up before it answers reads; a second try may go to other
        # replicas or find it answering (one try, tested only as a decision). The same
        # coordinator, not the next node: a query plan that runs out turns the timeout into a
        # NoHostAvailable, which says no node answered. A compare-and-set can also time out
        # while it reads the current values: not idempotent, never re-sent.
        if retry_num == 0 and getattr(query, "is_idempotent", False):
            return self.RETRY, consistency
        return self.RETHROW, None

    def on_write_timeout(
        self, query, consistency, write_type, required_responses, received_responses, retry_num
    ):
        idempotent = getattr(query, "is_idempotent", False)
        if retry_num == 0 and idempotent and write_type != WriteType.CAS:
            return self.RETRY, consistency
        return self.RETHROW, None

    def on_unavailable(self, query, consistency, required_replicas, alive_replicas, retry_num):
        # A plain write is refused before anything is sent to a replica. A compare-and-set is
        # not: Cassandra also raises Unavailable when it builds the commit's replica plan,
        # after the proposal was accepted, and the next round on the partition (a copy sent
        # again) completes it and then finds its own write. Connection.cas settles it.
        idempotent = getattr(query, "is_idempotent", False)
        return (
            (self.RETRY_NEXT_HOST, None) if retry_num == 0 and idempotent else (self.RETHROW, None)
        )

    def on_request_error(self, query, consistency, error, retry_num):
        # Overloaded comes before a request runs, or, for a compare-and-set, from the hint
        # check in the commit loop of an accepted proposal: like Unavailable, only what is
        # safe to apply twice goes to the next host. A node shutting down refuses before it
        # runs anything, so any statement may go on to the next host.
        if retry_num < 2 and (getattr(query, "is_idempotent", False) or is_shutdown_refusal(error)):
            return self.RETRY_NEXT_HOST, None
        return self.RETHROW, None
