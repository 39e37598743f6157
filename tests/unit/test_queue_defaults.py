"""A queue's defaults are written once (QueueSettings): every way to create a queue uses them."""

from __future__ import annotations

import inspect

from cassieq_spark.cli import build_parser
from cassieq_spark.client import QueueClient
from cassieq_spark.engine.core.queues import (
    DEFAULT_SETTINGS,
    SETTING_NAMES,
    UNSET,
    QueueInfo,
    QueueSettings,
)
from cassieq_spark.spark.options import parse_source_settings


def test_client_cli_spark_and_queue_info_share_the_defaults() -> None:
    """The client and the command line leave a setting not given unset (the client fills in
    DEFAULT_SETTINGS; ``exist_ok`` compares only what was given)."""
    create = inspect.signature(QueueClient.create_queue).parameters
    info = QueueInfo(name="q", queue_id=None)  # type: ignore[arg-type]
    args = build_parser().parse_args(["create-queue", "q"])
    for field in SETTING_NAMES:
        default = getattr(DEFAULT_SETTINGS, field)
        assert create[field].default is UNSET, field
        assert getattr(info, field) == default, field
        assert getattr(args, field) is None, field
    settings = parse_source_settings({"queue": "q", "createQueue": "true"}).common.queue_settings
    assert QueueSettings(**settings) == DEFAULT_SETTINGS
