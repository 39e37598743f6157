"""Client calls that used to take a wrong request without a word, or end in a raw Python
error: ``redrive`` from a queue that is no queue's dead-letter queue (its live messages went
into a dead-letter queue, counted as redriven), ``create_queue(exist_ok=True)`` asking for
settings the existing queue does not have (returned as it was, the asked dead-letter queue
ignored), a queue name that is not a string (a TypeError from the client's cache)."""

from __future__ import annotations

import pytest

from cassieq_spark.client import QueueClient
from cassieq_spark.errors import ConfigError, QueueExistsError

pytestmark = pytest.mark.integration


def test_redrive_from_a_queue_that_is_no_dead_letter_queue_is_refused(
    queue_client: QueueClient, queue_name: str
) -> None:
    """N92: cassieq redrive mv_app --to mv_dlq, mv_app a live queue."""
    app, dlq = queue_name, queue_name + "_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(app, dead_letter_queue=dlq)
    queue_client.put(app, b"live")
    with pytest.raises(ConfigError, match=f"queue '{app}' is not the dead-letter queue of any"):
        queue_client.redrive(app, to=dlq)
    assert queue_client.stats(app)["backlog"] == 1 and queue_client.stats(dlq)["backlog"] == 0
    assert queue_client.redrive(dlq, to=app).moved == 0  # the real dead-letter queue still is


def test_exist_ok_with_other_settings_than_the_queue_has_is_refused(
    queue_client: QueueClient, queue_name: str
) -> None:
    """N105: create_queue('cy_b', exist_ok=True, dead_letter_queue='cm_dst'), cy_b's dead-letter
    queue being cy_c."""
    b, c, dst = queue_name, queue_name + "_c", queue_name + "_dst"
    for name in (c, dst):
        queue_client.create_queue(name)
    queue_client.create_queue(b, dead_letter_queue=c, max_delivery_count=3)
    with pytest.raises(QueueExistsError) as info:
        queue_client.create_queue(b, exist_ok=True, dead_letter_queue=dst)
    message = str(info.value)
    assert f"dead_letter_queue '{c}' (asked '{dst}')" in message and "\n" not in message
    assert queue_client.get_queue(b).dead_letter_queue == c
    # Settings left at their defaults, or asked as the queue has them, are fine.
    assert queue_client.create_queue(b, exist_ok=True).dead_letter_queue == c
    same = queue_client.create_queue(b, exist_ok=True, dead_letter_queue=c, max_delivery_count=3)
    assert same.max_delivery_count == 3


@pytest.mark.parametrize("name", [["cm_src"], None, 5, b"q"])
def test_a_queue_name_that_is_not_a_string_is_a_config_error(
    queue_client: QueueClient, name: object
) -> None:
    """N102: q.purge(['cm_src']) raised TypeError: unhashable type: 'list'."""
    with pytest.raises(ConfigError, match="invalid queue name"):
        queue_client.purge(name)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid queue name"):
        queue_client.stats(name)  # type: ignore[arg-type]
