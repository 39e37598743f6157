"""Single v1 acks of one queue that arrive together are written by one ``ack_many``.

A lone ack reads its message's version and writes ``acked`` (no Paxos round), one request's
worth of round trips and a worker thread each. Concurrent v1 consumers of one queue tend to
ack together (the get batcher hands them their messages together), so the acks of a queue
that arrive while an ``ack_many`` of it is in flight go out in the next one: per bucket one
read and one batch of writes for all of them (the batching rules are :mod:`.batching`'s).

Invariants:

* An ack is answered only after the ``ack_many`` that carried it returned, with its own
  receipt's result: ``ok`` (acked by this call, 204) or not (stale, repeated or never issued:
  409, as a lone v1 ack of such a receipt). A receipt that is not one of the queue's
  (malformed, another queue's) is refused (400) before it joins a batch.
* A lone ack adds no wait; a batch that fails fails each ack it carried with that error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..engine.consume.batch_ack import ReceiptResult
from .batching import Batcher

MAX_BATCH = 250  # receipts in one ack_many (one read and one write per bucket)

AckMany = Callable[[str, Sequence[str]], Awaitable[Sequence[ReceiptResult]]]


class AckBatcher(Batcher[str, str, ReceiptResult]):
    """One per service instance; ``ack`` is called from request handlers on the event loop."""

    def __init__(self, ack_many: AckMany, max_batch: int = MAX_BATCH):
        super().__init__(ack_many, max_batch)

    async def ack(self, queue: str, receipt: str) -> bool:
        """True if this ack acked the message (False: stale, repeated or never issued)."""
        return (await self.submit(queue, receipt)).ok
