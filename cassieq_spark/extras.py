"""The optional dependencies of the features outside the core, loaded when a feature is used.

The core (``QueueClient``, ``cassieq``) needs only the Cassandra driver; the Spark connector,
the HTTP service, the terminal views and the plots each need an extra of the package
(``pyproject.toml``). A feature calls :func:`require` before it imports its dependency, so a
missing extra is one line that says what to install, not an ``ImportError`` from inside.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

#: feature -> (the module it needs, the extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "the Spark connector": ("pyspark", "spark"),
    "cassieq stats --watch": ("rich", "cli"),
    "the stats plot": ("matplotlib", "demo"),
    "cassieq serve": ("starlette", "server"),
    "Prometheus metrics": ("prometheus_client", "metrics"),
}


def require(feature: str) -> ModuleType:
    """Import what ``feature`` (a key of :data:`EXTRAS`) needs, or raise MissingExtraError."""
    module, extra = EXTRAS[feature]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{feature} needs {module}, which is not installed: "
            f"pip install 'cassieq-spark[{extra}]'"
        ) from exc
