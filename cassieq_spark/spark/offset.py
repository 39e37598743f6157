"""The streaming source's offset: a reader position plus a visibility time.

``{"id": I, "ts": T}`` (always this key order, integers only) means: every message with an id
below ``I`` whose due time (``visible_at``/``invisible_until``, if any) is at or before ``T``
(epoch milliseconds) has been handed to a micro-batch ending at or before this offset. Spark
stores offsets verbatim and compares them as strings, so the JSON form must be deterministic.

A micro-batch ``(start, end]`` therefore delivers

* the *id path*: ids in ``[start.id, end.id)`` that are due at ``end.ts`` (most messages have no
  due time at all), and
* the *timer path*: ids below ``start.id`` whose due time lies in ``(start.ts, end.ts]``
  (delayed messages the id path passed before they were due).

Every message is in exactly one batch: the time windows of consecutive batches are contiguous
and each id is passed by the id path exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError


def _int_field(d: Mapping, key: str) -> int:
    value = d.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < -1:
        raise ConfigError(
            f"invalid cassieq source offset {dict(d)!r}: {key!r} must be an integer >= -1; "
            "the checkpoint was not written by this source"
        )
    return value


@dataclass(frozen=True, order=True)
class SourceOffset:
    id: int
    ts: int  # epoch milliseconds

    def to_dict(self) -> dict[str, int]:
        return {"id": self.id, "ts": self.ts}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping) -> SourceOffset:
        if not isinstance(d, Mapping) or set(d) != {"id", "ts"}:
            raise ConfigError(
                f"invalid cassieq source offset {d!r}: expected {{'id': int, 'ts': int}}; "
                "the checkpoint was not written by this source"
            )
        return cls(_int_field(d, "id"), _int_field(d, "ts"))

    @classmethod
    def from_json(cls, text: str) -> SourceOffset:
        return cls.from_dict(json.loads(text))
