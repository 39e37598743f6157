"""The streaming source's offset: which queue, a reader position and a visibility time.

``{"queue": Q, "incarnation": U, "from": F, "id": I, "ts": T}`` (always this key order; ``Q``
and ``U`` strings, the rest integers) means: of the queue named ``Q`` whose current
incarnation has the id ``U``, every message with an id below ``I`` whose due time
(``visible_at``/``invisible_until``, if any) is at or before ``T`` (epoch milliseconds) has been
handed to a micro-batch ending at or before this offset. Spark stores offsets verbatim and
compares them as strings, so the JSON form must be deterministic.

The queue and its incarnation make a checkpoint unusable with any other queue: without them a
query restarted with another ``queue`` option, or after its queue was deleted and created
again, would apply its reader position to a queue it never read and ack what it never
delivered. Offsets of older versions, ``{"id", "ts"}`` only, cannot say which queue they
belong to and are refused.

``F`` is where the id path of the batch ending here starts: the larger of the previous offset's
``id`` and the queue's reader pointer when the batch was planned. It is above the previous
offset only when another consumer consumed ids since (a query restarted from an older
checkpoint, clients in between); those ids are not delivered again. It is part
of the offset so that a replayed batch reads exactly what its first attempt read.

A micro-batch ``(start, end]`` therefore delivers

* the *id path*: ids in ``[end.from, end.id)`` that are due at ``end.ts`` (most messages have
  no due time at all; nothing when ``end`` equals ``start``, a queue that did not move in a
  batch of several queues). It is read from ``end`` alone because Spark does not keep batch
  0's start: it asks ``initialOffset()`` again when it runs batch 0 and when a restart replays
  it, and a ``latest`` start computed then lies past the batch, and
* the *timer path*: delayed or once client-delivered messages with a smaller id that are due at
  ``end.ts`` and not acked yet, found through their timers in the slots from
  ``slot(start.ts)`` minus a settle margin (see ``engine/stream/timer_path.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import CheckpointMismatchError, ConfigError

KEYS = ("queue", "incarnation", "from", "id", "ts")


def _int_field(d: Mapping, key: str) -> int:
    value = d.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < -1:
        raise ConfigError(
            f"invalid cassieq source offset {dict(d)!r}: {key!r} must be an integer >= -1; "
            "the checkpoint was not written by this source"
        )
    return value


def _str_field(d: Mapping, key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"invalid cassieq source offset {dict(d)!r}: {key!r} must be a non-empty string; "
            "the checkpoint was not written by this source"
        )
    return value


@dataclass(frozen=True)
class SourceOffset:
    queue: str
    incarnation: str  # the queue's queue_id, as text
    from_id: int
    id: int
    ts: int  # epoch milliseconds

    def to_dict(self) -> dict[str, str | int]:
        return {
            "queue": self.queue,
            "incarnation": self.incarnation,
            "from": self.from_id,
            "id": self.id,
            "ts": self.ts,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @property
    def position(self) -> tuple[int, int]:
        """What orders offsets of one queue: the id, then the time."""
        return (self.id, self.ts)

    def covers(self, other: SourceOffset) -> bool:
        """Everything ``other`` stands for is also below this offset."""
        return self.id >= other.id and self.ts >= other.ts

    def check_queue(self, name: str, queue_id: uuid.UUID | str) -> None:
        """Fail unless this offset was written for the queue ``name`` in its incarnation
        ``queue_id``: a position in one queue means nothing in another."""
        if self.queue == name and self.incarnation == str(queue_id):
            return
        if self.queue == name:
            raise CheckpointMismatchError(
                f"the checkpoint of this query was written for queue {name!r} in its incarnation "
                f"{self.incarnation}, but that queue was deleted and created again since (now "
                f"incarnation {queue_id}); its positions mean nothing in the new queue. Start the "
                "query with a new checkpointLocation to consume the new queue from its beginning"
            )
        raise CheckpointMismatchError(
            f"the checkpoint of this query was written for queue {self.queue!r} (incarnation "
            f"{self.incarnation}), but the query now reads queue {name!r} (incarnation "
            f"{queue_id}); a checkpoint belongs to one queue. Set option queue to "
            f"{self.queue!r} again, or use a new checkpointLocation for {name!r}"
        )

    @classmethod
    def from_dict(cls, d: Mapping) -> SourceOffset:
        if isinstance(d, Mapping) and set(d) == {"queues"}:
            raise CheckpointMismatchError(
                f"the checkpoint of this query was written for the queues "
                f"{', '.join(sorted(map(str, d['queues'] or ())))} (option 'queues' or "
                "'queuePattern'), but the "
                "query now reads with option 'queue'; a checkpoint keeps the offsets of the "
                "queues it was written for. Use the same option again, or a new "
                "checkpointLocation"
            )
        if isinstance(d, Mapping) and set(d) == {"id", "ts"}:
            raise CheckpointMismatchError(
                f"the checkpoint holds the offset {dict(d)!r} of an older cassieq-spark, which "
                "does not record its queue; it cannot be checked against the queue read now. "
                "Start the query with a new checkpointLocation (the queue's reader pointer keeps "
                "what the old query acked, so nothing acked comes again)"
            )
        if not isinstance(d, Mapping) or set(d) != set(KEYS):
            raise ConfigError(
                f"invalid cassieq source offset {d!r}: expected the keys {', '.join(KEYS)}; "
                "the checkpoint was not written by this source"
            )
        return cls(
            _str_field(d, "queue"),
            _str_field(d, "incarnation"),
            _int_field(d, "from"),
            _int_field(d, "id"),
            _int_field(d, "ts"),
        )

    @classmethod
    def from_json(cls, text: str) -> SourceOffset:
        return cls.from_dict(json.loads(text))


SEVERAL = "queues"
ENTRY_KEYS = ("incarnation", "from", "id", "ts")


@dataclass(frozen=True)
class MultiOffset:
    """The offset of a source reading several queues (options ``queues``, ``queuePattern``):
    ``{"queues": {Q: {"incarnation": U, "from": F, "id": I, "ts": T}, ...}}``, names in sorted
    order, each entry meaning what a :class:`SourceOffset` means for its queue. A queue absent
    from a batch's start but present at its end joined the query with that batch: its entry
    is where its stream begins, and the batch delivers nothing from it."""

    offsets: dict[str, SourceOffset]

    def to_dict(self) -> dict[str, dict[str, dict[str, str | int]]]:
        return {
            SEVERAL: {
                name: {k: v for k, v in self.offsets[name].to_dict().items() if k != "queue"}
                for name in sorted(self.offsets)
            }
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> MultiOffset:
        if isinstance(d, Mapping) and set(d) != {SEVERAL} and "queue" in d:
            raise CheckpointMismatchError(
                f"the checkpoint of this query was written for the single queue {d['queue']!r} "
                "(option 'queue'), but the query now reads with option 'queues' or "
                "'queuePattern'; a checkpoint keeps the offsets of the queues it was written "
                f"for. Set option 'queue' to {d['queue']!r} again, or use a new "
                "checkpointLocation"
            )
        entries = d.get(SEVERAL) if isinstance(d, Mapping) and set(d) == {SEVERAL} else None
        if not isinstance(entries, Mapping):
            raise ConfigError(
                f'invalid cassieq source offset {d!r}: expected {{"queues": {{name: {{'
                f"{', '.join(ENTRY_KEYS)}}}}}}}; the checkpoint was not written by this source"
            )
        offsets = {}
        for name, entry in entries.items():
            if not isinstance(entry, Mapping) or set(entry) != set(ENTRY_KEYS):
                raise ConfigError(
                    f"invalid cassieq source offset entry {name!r}: {entry!r}; expected the "
                    f"keys {', '.join(ENTRY_KEYS)}: the checkpoint was not written by this source"
                )
            offsets[str(name)] = SourceOffset.from_dict({"queue": name, **entry})
        return cls(offsets)
