"""The queue a streaming query's sink writes to, recorded in its checkpoint.

A query restarted from its checkpoint replays its last uncommitted micro-batch, and the sink
finds that batch's blocks by key in the queue it writes to. Pointed at another queue (another
name, keyspace or cluster, or the same name deleted and created again), it finds nothing
there and writes the whole batch again, while the first queue keeps what the first attempt
wrote: the batch is in both. So the first run records its target next to Spark's own files in
the checkpoint (for a sink whose rows name their queues and that has no option 'queue': the
keyspace and cluster), and a restart that points elsewhere fails, unless ``allowTargetChange=true``
(then the new target is recorded).

Checkpoints on the local file system are read directly, others through ``pyarrow.fs``
(``hdfs://``, ``s3://``, ``gs://``); where neither can open it, the check is skipped with a
warning.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection
from ..errors import ConfigError

log = logging.getLogger(__name__)

FILE_NAME = "cassieq-sink-target.json"

_checked: dict[str, Target] = {}  # checkpoint -> target already checked by this process


@dataclass(frozen=True)
class Target:
    cluster: str
    keyspace: str
    queue: str
    queue_id: str

    @classmethod
    def of(cls, conn: Connection, queue: QueueInfo | None) -> Target:
        """The sink's target: option 'queue' (``queue``), or with None a sink whose rows name
        their queues (its column ``queue``): then the keyspace and cluster they are in."""
        cluster = conn.cluster.metadata.cluster_name or "?"
        if queue is None:
            return cls(cluster, conn.keyspace, "", "")
        return cls(cluster, conn.keyspace, queue.name, str(queue.queue_id))

    def describe(self) -> str:
        where = f"keyspace {self.keyspace!r} of cluster {self.cluster!r}"
        if not self.queue:
            return f"the queues its rows name in {where}"
        return f"queue {self.queue!r} (incarnation {self.queue_id}) in {where}"


def check_target(checkpoint: str | None, target: Target, allow_change: bool) -> None:
    """Record ``target`` under ``checkpoint`` the first time; fail if it names another."""
    if not checkpoint or _checked.get(checkpoint) == target:
        return
    store = _Store.open(checkpoint)
    if store is None:
        return
    recorded = store.read()
    if recorded is not None and recorded != target:
        if not allow_change:
            raise ConfigError(
                f"the checkpoint {checkpoint} belongs to a query whose cassieq sink wrote to "
                f"{recorded.describe()}; now it points at {target.describe()}. Its last "
                "micro-batch may be replayed, and would then be enqueued in both. Restart it "
                "with the first target, or use a new checkpointLocation for the new one, or set "
                "option allowTargetChange=true (the replayed batch may then be in both queues)"
            )
        log.warning(
            "checkpoint %s: the sink moves from %s to %s (allowTargetChange=true)",
            checkpoint,
            recorded.describe(),
            target.describe(),
        )
    if recorded != target:
        store.write(target)
    _checked[checkpoint] = target


class _Store:
    def __init__(self, read_bytes, write_bytes):
        self._read = read_bytes
        self._write = write_bytes

    @classmethod
    def open(cls, checkpoint: str) -> _Store | None:
        url = urlparse(checkpoint)
        if url.scheme in ("", "file"):
            return cls.local(Path(url.path if url.scheme else checkpoint) / FILE_NAME)
        try:
            import pyarrow.fs as pafs

            fs, root = pafs.FileSystem.from_uri(checkpoint)
        except Exception as exc:
            log.warning(
                "cannot open checkpoint %s from Python (%s); the cassieq sink does not check "
                "that a restarted query writes to the same queue",
                checkpoint,
                exc,
            )
            return None
        path = f"{root.rstrip('/')}/{FILE_NAME}"

        def read_bytes() -> bytes | None:
            try:
                with fs.open_input_stream(path) as f:
                    return f.read()
            except FileNotFoundError:
                return None

        def write_bytes(data: bytes) -> None:
            fs.create_dir(root, recursive=True)
            tmp = f"{path}.tmp"
            with fs.open_output_stream(tmp) as f:
                f.write(data)
            fs.move(tmp, path)

        return cls(read_bytes, write_bytes)

    @classmethod
    def local(cls, path: Path) -> _Store:
        def read_bytes() -> bytes | None:
            try:
                return path.read_bytes()
            except FileNotFoundError:
                return None

        def write_bytes(data: bytes) -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # never a half-written file, whatever happens

        return cls(read_bytes, write_bytes)

    def read(self) -> Target | None:
        data = self._read()
        if data is None:
            return None
        try:
            return Target(**json.loads(data))
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"the cassieq sink's record in the checkpoint ({FILE_NAME}) is unreadable: "
                f"{exc}; delete it to record the current target"
            ) from None

    def write(self, target: Target) -> None:
        self._write(json.dumps(asdict(target), indent=1).encode("utf-8"))
