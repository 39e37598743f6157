"""The queue a streaming query's sink writes to, recorded in its checkpoint.

A query restarted from its checkpoint replays its last uncommitted micro-batch, and the sink
finds that batch's blocks by key in the queue it writes to. Pointed at another queue (another
name, keyspace or cluster, or the same name deleted and created again), it finds nothing
there and writes the whole batch again, while the first queue keeps what the first attempt
wrote: the batch is in both. So the first run records its target next to Spark's own files in
the checkpoint (for a sink whose rows name their queues and that has no option 'queue': the
keyspace and cluster), and a restart that points elsewhere fails, unless ``allowTargetChange=true``
(then the new target is recorded).

Where the record is read and written, in this order:

* through Spark's own file system API (the JVM's Hadoop ``FileSystem`` with the session's
  Hadoop configuration, so any scheme and credentials Spark writes its checkpoint with:
  ``s3a://``, ``abfss://``, ``wasbs://``, ``dbfs:/``, ``file:``) when the process that plans the
  sink has a Spark JVM gateway (a driver process in classic mode);
* otherwise (PySpark plans Python data sources in a Python worker, which has no gateway):
  local paths and ``file:`` directly, other schemes through ``pyarrow.fs`` (``hdfs://``,
  ``s3://``, ``gs://``, with credentials that worker can see);
* a checkpoint neither can open is refused with an error that names its scheme: the check would
  be silently off. ``allowTargetChange=true`` runs without it (a warning names the scheme).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from xml.etree import ElementTree

from ..engine.core import queues
from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection
from ..engine.write import records
from ..errors import ConfigError

log = logging.getLogger(__name__)

FILE_NAME = "cassieq-sink-target.json"
METADATA_FILE = "metadata"  # Spark's own file in a checkpoint: {"id": query id}

_checked: dict[str, Target] = {}  # checkpoint -> target already checked by this process
# (keyspace, query id) -> the target record this process checked or wrote
_checked_queries: dict[tuple[str, str], tuple[int, int]] = {}


def forget_checked() -> None:
    """Forget which checkpoints this process checked, so that the next check reads the
    checkpoint's target file again, as a new driver process does."""
    _checked.clear()


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
    store, why = _Store.open(checkpoint)
    if store is None:
        where = qualified(checkpoint)
        scheme = urlparse(where).scheme
        shown = checkpoint
        if where != checkpoint:  # a path without a scheme, on a default file system elsewhere
            shown = f"{checkpoint} ({where}: Spark's default file system, fs.defaultFS)"
        if not allow_change:
            raise ConfigError(
                f"the cassieq sink cannot open the checkpoint {shown} (scheme {scheme!r}: "
                f"{why}) from the Python process that plans it, so it cannot check that a "
                "restarted query writes to the queue its replayed batch went to. Put the "
                "checkpoint on a file system Python opens (a local path, file:, hdfs://, s3://, "
                "gs:// with credentials in the worker), or set option allowTargetChange=true to "
                "run without the check (after a change of target, a replayed batch may then be "
                "in both queues)"
            )
        log.warning(
            "checkpoint %s (scheme %r): cannot open it from Python (%s); the cassieq sink runs "
            "without checking its target (allowTargetChange=true)",
            shown,
            scheme,
            why,
        )
        _checked[checkpoint] = target
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


def query_id_of(checkpoint: str) -> str:
    """The id of the streaming query whose checkpoint is ``checkpoint``: Spark writes it to
    the checkpoint's ``metadata`` file when the query first starts, and keeps it for every
    restart from that checkpoint (a new checkpoint, even at the same path once deleted, gets a
    new one)."""
    store, why = _Store.open(checkpoint, METADATA_FILE)
    if store is None:
        raise ConfigError(
            f"option queryCheckpoint: the cassieq sink cannot open the checkpoint {checkpoint} "
            f"({why}) from the Python process that plans it, so it cannot read the query's id. "
            "Put the checkpoint on a file system Python opens (a local path, file:, hdfs://, "
            "s3://, gs://)"
        )
    data = store.raw()
    try:
        query = json.loads(data)["id"] if data is not None else None
    except (ValueError, TypeError, KeyError):
        query = None
    if not isinstance(query, str) or not query:
        raise ConfigError(
            f"option queryCheckpoint: {checkpoint} holds no streaming query's metadata "
            f"({METADATA_FILE} with its id); pass the checkpointLocation of the query whose "
            "foreachBatch runs this write, as given to writeStream"
        )
    return query


def default_fs() -> str:
    """The file system a path without a scheme is on, as Spark resolves it: ``fs.defaultFS``
    of the Hadoop configuration (``spark.hadoop.fs.defaultFS`` in ``spark-defaults.conf``,
    else ``core-site.xml`` in ``HADOOP_CONF_DIR`` or ``SPARK_CONF_DIR``), ``file:///`` when
    none sets it. The Python process that plans the sink has no Spark JVM to ask, but it
    inherits the environment Spark found its configuration through."""
    conf_dirs = [os.environ.get(v) for v in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR")]
    if os.environ.get("SPARK_HOME"):
        conf_dirs.append(os.path.join(os.environ["SPARK_HOME"], "conf"))
    for d in filter(None, conf_dirs):
        defaults = Path(d) / "spark-defaults.conf"
        if defaults.is_file():
            for line in defaults.read_text(errors="replace").splitlines():
                parts = line.strip().split(None, 1)
                if len(parts) == 2 and parts[0] == "spark.hadoop.fs.defaultFS":
                    return parts[1].strip()
    for d in filter(None, conf_dirs):
        site = Path(d) / "core-site.xml"
        if site.is_file():
            try:
                root = ElementTree.parse(site).getroot()
            except ElementTree.ParseError:
                continue
            for prop in root.iter("property"):
                if (prop.findtext("name") or "").strip() in ("fs.defaultFS", "fs.default.name"):
                    return (prop.findtext("value") or "").strip() or "file:///"
    return "file:///"


def qualified(checkpoint: str) -> str:
    """``checkpoint`` with the scheme Spark puts it on: a path without one is on the default
    file system (:func:`default_fs`), a relative one under that file system's working
    directory (``/user/<name>`` on HDFS, as Hadoop's)."""
    if urlparse(checkpoint).scheme:
        return checkpoint
    fs = default_fs()
    url = urlparse(fs)
    if url.scheme in ("", "file"):
        return checkpoint
    path = checkpoint
    if not path.startswith("/"):
        home = f"/user/{getpass.getuser()}" if url.scheme in ("hdfs", "viewfs") else ""
        path = f"{home}/{path}"
    return f"{url.scheme}://{url.netloc}{path}"


def check_query_target(conn: Connection, query_id: str, target: Target, allow_change: bool) -> None:
    """The target check keyed by the streaming query's id (which every task of the query sees,
    whatever file system or setting its checkpoint comes from), in the target's keyspace: the
    first task of a query records its queue (its incarnation; a routed sink: none), a task of
    a restart pointed at another queue fails before it writes a row."""
    want = records.uuid_halves(uuid.UUID(target.queue_id)) if target.queue_id else (0, 0)
    key = f"target:{query_id}"
    cache = (conn.keyspace, query_id)
    if _checked_queries.get(cache) == want:
        return
    got = records.read(conn, records.TARGETS, key)
    if got is None:
        got = records.first(conn, records.TARGETS, key, *want)
    if got != want:
        before = "the queues its rows name" if got == (0, 0) else _queue_named(conn, got)
        if not allow_change:
            raise ConfigError(
                f"streaming query {query_id} wrote with its cassieq sink to {before} in keyspace "
                f"{conn.keyspace!r}; now it writes to {target.describe()}. Its last micro-batch "
                "may be replayed, and would then be enqueued in both. Restart it with the first "
                "target, or use a new checkpointLocation for the new one, or set option "
                "allowTargetChange=true (the replayed batch may then be in both queues)"
            )
        log.warning(
            "streaming query %s: the sink moves from %s to %s (allowTargetChange=true)",
            query_id,
            before,
            target.describe(),
        )
    # Written again by every new process: the record lives as long as the replay keys do.
    records.put(conn, records.TARGETS, key, *want)
    _checked_queries[cache] = want


def _queue_named(conn: Connection, halves: tuple[int, int]) -> str:
    queue_id = records.uuid_of(halves)
    for q in queues.list_queues(conn):
        if q.queue_id == queue_id:
            return f"queue {q.name!r} (incarnation {queue_id})"
    return f"a queue since deleted (incarnation {queue_id})"


def spark_jvm() -> Any:
    """The JVM of this process's active SparkContext (classic mode), or None: no PySpark, no
    active context (a Python worker, where Spark plans Python data sources), Spark Connect."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    sc = SparkContext._active_spark_context
    if sc is None or sc._jsc is None:
        return None
    return sc._jvm


class _Store:
    def __init__(self, read_bytes, write_bytes):
        self._read = read_bytes
        self._write = write_bytes

    @classmethod
    def open(cls, checkpoint: str, name: str = FILE_NAME) -> tuple[_Store | None, str]:
        """A store for the file ``name`` under ``checkpoint``, or None and why not."""
        jvm = spark_jvm()
        if jvm is not None:
            try:
                return cls.hadoop(jvm, checkpoint, name), ""
            except Exception as exc:  # py4j's error of a scheme Spark cannot open either
                return None, f"Spark's file systems: {str(exc).strip().splitlines()[0]}"
        checkpoint = qualified(checkpoint)
        url = urlparse(checkpoint)
        if url.scheme in ("", "file"):
            return cls.local(Path(url.path if url.scheme else checkpoint) / name), ""
        try:
            import pyarrow.fs as pafs

            fs, root = pafs.FileSystem.from_uri(checkpoint)
        except Exception as exc:
            return None, f"pyarrow: {exc}"
        path = f"{root.rstrip('/')}/{name}"

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

        return cls(read_bytes, write_bytes), ""

    @classmethod
    def hadoop(cls, jvm: Any, checkpoint: str, name: str = FILE_NAME) -> _Store:
        """Through the JVM's Hadoop ``FileContext`` with the active session's Hadoop
        configuration: the file system (and credentials) Spark writes the checkpoint with.
        The record is written to a temporary file, then renamed over the old one."""
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is None or sc._jsc is None:
            raise ConfigError("no active Spark context: the checkpoint cannot be opened via Spark")
        gateway: Any = sc._gateway
        conf = sc._jsc.hadoopConfiguration()
        hfs = jvm.org.apache.hadoop.fs
        root = hfs.Path(checkpoint)
        path = hfs.Path(root, name)
        fc = hfs.FileContext.getFileContext(root.toUri(), conf)

        def read_bytes() -> bytes | None:
            if not fc.util().exists(path):
                return None
            stream = fc.open(path)
            try:
                return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

        def write_bytes(data: bytes) -> None:
            tmp = hfs.Path(root, f".{name}.{uuid.uuid4().hex}.tmp")
            flags = jvm.java.util.EnumSet.of(jvm.org.apache.hadoop.fs.CreateFlag.CREATE)
            no_opts = gateway.new_array(jvm.org.apache.hadoop.fs.Options.CreateOpts, 0)
            fc.mkdir(root, hfs.permission.FsPermission.getDirDefault(), True)
            out = fc.create(tmp, flags, no_opts)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            overwrite = gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
            overwrite[0] = jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
            fc.rename(tmp, path, overwrite)

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

    def raw(self) -> bytes | None:
        return self._read()

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
