"""A queue's defaults are written once (QueueSettings): every way to create a queue uses them."""

from __future__ import annotations

import inspect

from cassieq_spark.cli import build_parser
from cassieq_spark.client import QueueClient
from cassieq_spark.engine.core.queues import DEFAULT_SETTINGS, QueueInfo, QueueSettings
from cassieq_spark.spark.options import parse_source_settings


def test_client_cli_spark_and_queue_info_share_the_defaults() -> None:
    create = inspect.signature(QueueClient.create_queue).parameters
    info = QueueInfo(name="q", queue_id=None)  # type: ignore[arg-type]
    args = build_parser().parse_args(["create-queue", "q"])
    for field in ("bucket_size", "max_delivery_count", "visibility_timeout", "repair_timeout"):
        default = getattr(DEFAULT_SETTINGS, field)
        assert create[field].default == default, field
        assert getattr(info, field) == default, field
        if field != "bucket_size":  # the command line leaves it to the engine (None)
            assert getattr(args, field) == default, field
    assert create["max_payload_bytes"].default == DEFAULT_SETTINGS.max_payload_bytes
    settings = parse_source_settings({"queue": "q", "createQueue": "true"}).common.queue_settings
    assert QueueSettings(**settings) == DEFAULT_SETTINGS
