"""A node whose wall clock runs ahead of or behind the machine's, through Cassandra's clock seam.

Cassandra 5.0 reads the wall clock only through ``org.apache.cassandra.utils.Clock.Global``,
which builds the class named by the system property ``cassandra.clock`` when it is first used.
``java/OffsetClock.java`` is such a class: the system's wall clock plus an offset in
milliseconds (``cassieq.clock_offset_ms``), the system's ``nanoTime``. It is compiled on demand
against the Cassandra jars into ``<base_dir>/clock/<hash of the source>/`` (a changed source
compiles anew; an unchanged one is reused), and :func:`offset_clock` returns the
:class:`~.config.JvmExtras` that start a node on it (``LocalCassandra.node_jvm[index]``).

What the offset moves on that node (checked in the 5.0.9 jar: no class of the server but
``Clock.Default`` reads ``System.currentTimeMillis``): every wall-clock reading, so the write
timestamps it stamps as a coordinator (``FBUtilities.timestampMicros``,
``ClientState.getTimestamp``: statements that carry no client timestamp), its Paxos ballots
(``ClientState.getTimestampForPaxos``: the write time of a compare-and-set it coordinates),
``now()`` and ``currentTimestamp()`` in CQL (``TimeUUID.Generator``), the "now" of TTL expiry and
tombstone purging (``nowInSeconds``), its gossip generation and the creation times its messages
carry to other nodes (``MonotonicClock``'s epoch sampling reads ``Clock.Global.currentTimeMillis``).
What it does not move: intervals and timeouts (``nanoTime``, ``approxTime``/``preciseTime``
``now()``), which stay the machine's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .config import LIB_DIR, CassandraError, JvmExtras

log = logging.getLogger(__name__)

OFFSET_CLOCK_SOURCE = Path(__file__).resolve().parent / "java" / "OffsetClock.java"
OFFSET_CLOCK_CLASS = "cassieq.dev.OffsetClock"
CLOCK_PROPERTY = "cassandra.clock"
OFFSET_PROPERTY = "cassieq.clock_offset_ms"
# One day either way: beyond it a "skewed node" test is a test of a broken machine.
MAX_OFFSET_MS = 86_400_000
# The class runs in Java 11 and 17 JVMs (config.SUPPORTED_JAVA), whatever JDK compiles it.
JAVA_RELEASE = "11"
JDK_PACKAGE = "openjdk-17-jdk-headless"


def check_offset_ms(offset_ms: object) -> int:
    """``offset_ms`` as an int of milliseconds within +/- ``MAX_OFFSET_MS``, or a clear error."""
    if isinstance(offset_ms, bool) or not isinstance(offset_ms, int):
        raise ValueError(
            f"clock offset must be a whole number of milliseconds, got {offset_ms!r}: "
            "pass e.g. 2000 (ahead) or -2000 (behind)"
        )
    if abs(offset_ms) > MAX_OFFSET_MS:
        raise ValueError(
            f"clock offset must be within +/- {MAX_OFFSET_MS} ms (one day), got {offset_ms}"
        )
    return offset_ms


def offset_clock_extras(offset_ms: int, classes: Path) -> JvmExtras:
    """The JVM extras that start a node on the offset clock compiled into ``classes``."""
    return JvmExtras(
        props={
            CLOCK_PROPERTY: OFFSET_CLOCK_CLASS,
            OFFSET_PROPERTY: str(check_offset_ms(offset_ms)),
        },
        classpath=(classes,),
    )


def classes_dir(base_dir: Path, source_text: str) -> Path:
    """Where the class compiled from ``source_text`` lives under a cluster's ``base_dir``: named
    by the source's hash, so an edited source is compiled anew and never mixed up with an old
    class."""
    digest = hashlib.sha256(source_text.encode()).hexdigest()[:16]
    return base_dir / "clock" / digest


def class_file(classes: Path) -> Path:
    return classes.joinpath(*OFFSET_CLOCK_CLASS.split(".")).with_suffix(".class")


def javac_command(javac: str, source: Path, out_dir: Path, lib_dir: Path = LIB_DIR) -> list[str]:
    """The command that compiles ``source`` against the Cassandra jars of ``lib_dir``."""
    return [
        javac,
        "--release",
        JAVA_RELEASE,
        "-nowarn",
        "-cp",
        f"{lib_dir}/*",
        "-d",
        str(out_dir),
        str(source),
    ]


def find_javac() -> str:
    """javac from JAVA_HOME or PATH, or a clear error naming what to install."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "javac").is_file():
        return str(Path(java_home) / "bin" / "javac")
    javac = shutil.which("javac")
    if not javac:
        raise CassandraError(
            "no javac found (a node with a clock of its own needs its clock class compiled): "
            f"install a JDK (Debian: `apt-get install -y {JDK_PACKAGE}`) or set JAVA_HOME "
            "to one"
        )
    return javac


def compile_offset_clock(
    base_dir: Path, lib_dir: Path = LIB_DIR, source: Path = OFFSET_CLOCK_SOURCE
) -> Path:
    """The classpath directory holding the offset clock compiled from ``source``; compiled
    now unless this very source was compiled there before. Compiles into a fresh directory
    renamed into place, so a concurrent caller never sees half a class."""
    from .process import check_lib_dir

    classes = classes_dir(base_dir, source.read_text())
    if class_file(classes).is_file():
        return classes
    check_lib_dir(lib_dir)
    javac = find_javac()
    classes.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="compiling-", dir=classes.parent))
    try:
        out = subprocess.run(
            javac_command(javac, source, scratch, lib_dir), capture_output=True, text=True
        )
        if out.returncode != 0:
            raise CassandraError(
                f"javac could not compile {source} (exit {out.returncode}): "
                f"{(out.stderr or out.stdout).strip()[:500]}"
            )
        try:
            scratch.rename(classes)
        except OSError:  # another process put it there first: same source, same class
            if not class_file(classes).is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("compiled %s into %s", source.name, classes)
    return classes


def offset_clock(base_dir: Path, offset_ms: int, lib_dir: Path = LIB_DIR) -> JvmExtras:
    """The JVM extras of a node whose wall clock runs ``offset_ms`` milliseconds ahead of the
    machine's (behind when negative), its clock class compiled under ``base_dir`` if needed.
    Applied at the node's next start: ``cluster.node_jvm[index] = offset_clock(...)``."""
    check_offset_ms(offset_ms)
    return offset_clock_extras(offset_ms, compile_offset_clock(base_dir, lib_dir))
