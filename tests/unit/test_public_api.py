"""The package's public names are pinned: a change to them is a change to this list, on purpose."""

from __future__ import annotations

import cassieq_spark

PUBLIC = {
    "QueueClient",
    "PutEntry",
    "AsyncQueueClient",
    "ConnectionConfig",
    "Message",
    "ReceiptResult",
    "QueueInfo",
    "CassandraUnavailableError",
    "CassieQError",
    "ConfigError",
    "ConnectionFailedError",
    "ContentionError",
    "MissingExtraError",
    "PermissionDeniedError",
    "PayloadTooLargeError",
    "QueueBusyError",
    "QueueExistsError",
    "QueueNotFoundError",
    "QueueSettingsMismatchError",
    "SchemaNotBootstrappedError",
    "StaleReceiptError",
}
# Loaded on first use: they need the [spark] extra.
LAZY = {"CassieQDataSource", "dead_letter", "register"}


def test_the_exported_names_are_the_pinned_ones() -> None:
    assert set(cassieq_spark.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(cassieq_spark, name) is not None, name
        assert not name.startswith("_")


def test_the_spark_names_load_on_first_use() -> None:
    for name in LAZY:
        assert callable(getattr(cassieq_spark, name)), name


def test_every_error_a_user_can_act_on_is_a_cassieq_error() -> None:
    for name in PUBLIC:
        obj = getattr(cassieq_spark, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, cassieq_spark.CassieQError), name
