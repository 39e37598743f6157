"""Pages of a read of message bodies: safe first, then sized by what was read."""

from __future__ import annotations

import uuid
from collections import namedtuple

from cassieq_spark.engine.core.messages import (
    BODY_BUDGET_BYTES,
    DEFAULT_PAGE_ROWS,
    PageSizer,
    rows_per_read,
)
from cassieq_spark.engine.core.queues import QueueInfo

Row = namedtuple("Row", "id payload headers")
MiB = 1024 * 1024


def _queue(max_payload: int) -> QueueInfo:
    return QueueInfo(name="q", queue_id=uuid.uuid4(), max_payload_bytes=max_payload)


def _rows(size: int, n: int = 10) -> list[Row]:
    return [Row(i, b"x" * size, {"h": "v"}) for i in range(n)]


def test_the_first_page_fits_the_budget_with_every_row_at_the_maximum() -> None:
    q = _queue(MiB)
    pages = PageSizer(q)
    assert pages.rows == rows_per_read(q)
    assert pages.rows * q.max_payload_bytes <= BODY_BUDGET_BYTES


def test_small_messages_grow_the_page_fourfold_up_to_the_drivers_size() -> None:
    pages = PageSizer(_queue(MiB))
    seen = [pages.rows]
    for _ in range(8):
        pages.saw(_rows(100))
        seen.append(pages.rows)
    assert seen[1] == 4 * seen[0] and seen[2] == 16 * seen[0]
    assert seen[-1] == DEFAULT_PAGE_ROWS
    assert seen == sorted(seen)


def test_large_rows_keep_pages_small_and_never_below_the_safe_size() -> None:
    q = _queue(15 * MiB)
    pages = PageSizer(q)
    for _ in range(5):
        pages.saw(_rows(100))
    grown = pages.rows
    pages.saw(_rows(8 * MiB, 1))  # one large row: twice it must fit the budget
    assert pages.rows < grown
    assert pages.rows == max(rows_per_read(q), BODY_BUDGET_BYTES // (16 * MiB))


def test_headers_count_towards_a_rows_size() -> None:
    pages = PageSizer(_queue(MiB))
    pages.saw([Row(1, b"", {"k": "v" * (4 * MiB)})])
    assert pages.largest == 1 + 4 * MiB
