"""Connection settings and option parsing, shared by the client, the CLI, the sink and the source.

One concern per module: :mod:`.connection` (the settings and their checks), :mod:`.options`
(Spark-style options, ``CASSIEQ_*`` variables, password files), :mod:`.flags` (command-line
flags), :mod:`.replication` (what the consistency levels need from a keyspace). Everything is
re-exported here, so ``from cassieq_spark.config import ...`` stays the one import to use.
"""

from __future__ import annotations

# Limits and checks live in validate.py; re-exported here for the modules that import them
# from config.
from ..validate import (
    KEYSPACE_RE,
    MAX_DELAY_SECONDS,
    MAX_MESSAGE_TTL_SECONDS,
    MAX_REPAIR_TIMEOUT_SECONDS,
    MAX_VISIBILITY_SECONDS,
    QUEUE_NAME_RE,
    delay_seconds,
    repair_timeout_seconds,
    seconds,
    visibility_seconds,
)
from ..validate import queue_name as validate_queue_name
from .connection import (
    BELOW_QUORUM,
    CONSISTENCY_LEVELS,
    SERIAL_LEVELS,
    ConnectionConfig,
    load_auth_provider,
)
from .flags import add_connection_flags, options_from_flags
from .options import (
    CONNECTION_OPTIONS,
    ENV_PREFIX,
    URL_FORM,
    connection_from_options,
    env_defaults,
    parse_url,
    read_password_file,
)
from .replication import check_cluster, check_replication, replica_data_centers

__all__ = [
    "BELOW_QUORUM",
    "CONNECTION_OPTIONS",
    "CONSISTENCY_LEVELS",
    "ENV_PREFIX",
    "KEYSPACE_RE",
    "MAX_DELAY_SECONDS",
    "MAX_MESSAGE_TTL_SECONDS",
    "MAX_REPAIR_TIMEOUT_SECONDS",
    "MAX_VISIBILITY_SECONDS",
    "QUEUE_NAME_RE",
    "SERIAL_LEVELS",
    "URL_FORM",
    "ConnectionConfig",
    "add_connection_flags",
    "check_cluster",
    "check_replication",
    "connection_from_options",
    "delay_seconds",
    "env_defaults",
    "load_auth_provider",
    "options_from_flags",
    "parse_url",
    "read_password_file",
    "repair_timeout_seconds",
    "replica_data_centers",
    "seconds",
    "validate_queue_name",
    "visibility_seconds",
]
