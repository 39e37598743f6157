"""One exception type per failure a user can act on.

Every message says what went wrong *and* what to do about it.
"""

from __future__ import annotations

from cassandra.cluster import NoHostAvailable


class CassieQError(Exception):
    """Base class of every error raised by cassieq-spark."""


class ConfigError(CassieQError, ValueError):
    """An option, argument or column is missing or has a value that is not allowed."""


class CheckpointMismatchError(ConfigError):
    """A streaming checkpoint belongs to another queue, or to an earlier incarnation of this one
    (deleted and created again), or was written by a version that did not record its queue."""


class SchemaNotBootstrappedError(CassieQError):
    """The keyspace or the cassieq tables do not exist yet."""


class QueueNotFoundError(CassieQError, KeyError):
    """The named queue does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "queue not found"


class QueueExistsError(CassieQError):
    """create_queue was asked for a name that is taken (pass exist_ok=True to reuse it)."""


class QueueSettingsMismatchError(QueueExistsError):
    """create_queue with ``exist_ok`` (or the sink's ``createQueue=true``) found the queue with
    other settings than the ones asked for. ``differences`` maps each differing setting to
    ``(the queue's value, the asked value)``."""

    def __init__(self, message: str, differences: dict[str, tuple[object, object]]):
        super().__init__(message)
        self.differences = differences


class PayloadTooLargeError(ConfigError):
    """A payload is larger than the queue's maximum message size."""


class StaleReceiptError(CassieQError):
    """A pop receipt no longer owns its message (it was acked, or redelivered to someone else)."""


class InvalidReceiptError(ConfigError, StaleReceiptError):
    """A string that is not a pop receipt of this queue: malformed, forged, or another queue's
    (or an earlier incarnation's). A StaleReceiptError too, for code written before it existed."""


class KeyspaceReplicationError(ConfigError):
    """The keyspace's replication cannot be served by the cluster, or differs from the one
    asked for."""


class QueueBusyError(CassieQError):
    """Another consumer holds the queue's streaming lease."""


class ConnectionFailedError(CassieQError):
    """The Cassandra cluster could not be reached or refused the credentials."""


class CassandraUnavailableError(ConnectionFailedError, NoHostAvailable):
    """No node of the cluster could take a request (all down, or unreachable): the operation
    did not complete. Nothing acknowledged is lost; retry, or restart the streaming query from
    its checkpoint, once the cluster is back. Also a driver ``NoHostAvailable``, so code that
    settles an unknown outcome handles it as before."""

    def __init__(self, message: str, errors: dict | None = None, *, delivered: bool = True):
        NoHostAvailable.__init__(self, message, errors or {})
        # False when no node received the request: it cannot have applied, so a caller that
        # settles unknown outcomes has nothing to settle.
        self.delivered = delivered

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # pickled across Spark's Python workers
        return (type(self), (str(self.args[0]), {}), {"delivered": self.delivered})


class ClientClosedError(CassieQError):
    """A call on a client after its ``close()`` (or on a session its owner shut down): make a
    new client. Not a cluster outage: nothing was sent."""


class PermissionDeniedError(CassieQError):
    """The role lacks a permission; the message names it (schema commands need an admin)."""


class ContentionError(CassieQError):
    """A lightweight transaction lost too many races in a row; retry later."""


class ReplayMismatchError(CassieQError):
    """A replayed write has other rows than the attempt that first wrote under its key, so
    honouring the key would skip rows never written; run the replay with the first attempt's
    input and partitioning (while no attempt with other input ran since), or allow it to write
    such rows again (possible duplicates)."""


class PoisonBatchError(CassieQError):
    """A streaming query's batch failed as many runs as it may (``maxBatchAttempts``) and its
    queue has no dead-letter queue to move the messages to: the source refuses to drop them
    unless ``failOnDataLoss=false``; the message names the queue, the ids and the ways out."""


class DataLossError(CassieQError):
    """Messages a streaming query needed are gone for good: repair counted ids as lost (their
    reservation was never written). Raised by the source with ``failOnDataLoss=true`` (the
    default); the message names the queue, the ids, the cause and how to go on."""

    def __init__(self, message: str, queue: str = "", ranges: tuple = (), cause: str = ""):
        super().__init__(message)
        self.queue = queue
        self.ranges = tuple(ranges)  # ((lo, hi, lost), ...): hi exclusive
        self.cause = cause

    def __reduce__(self):  # pickled across Spark's Python workers
        return (type(self), (str(self.args[0]), self.queue, self.ranges, self.cause))


def one_line(exc: BaseException) -> str:
    """An error as command lines print it: one line, our own errors without their class name."""
    what = "" if isinstance(exc, CassieQError) else f"{type(exc).__name__}: "
    return what + (" ".join(str(exc).split()) or type(exc).__name__)


class MissingExtraError(CassieQError, ImportError):
    """A feature needs an optional dependency that is not installed: the message names the
    ``pip install 'cassieq-spark[extra]'`` that adds it."""
