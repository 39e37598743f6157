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
    "ClientClosedError",
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


def test_importing_the_package_or_its_spark_connector_needs_no_greenlet() -> None:
    """Spark executors import the package from an environment docs/spark-cluster.md lists
    (no greenlet): only the asyncio client, loaded on first use, needs it."""
    import subprocess
    import sys

    code = (
        "import sys, cassieq_spark, cassieq_spark.client, cassieq_spark.spark.sink_input;"
        "assert 'greenlet' not in sys.modules, 'greenlet imported';"
        "from cassieq_spark import AsyncQueueClient;"
        "assert 'greenlet' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
