"""Which queues a source reads: one type per way of naming them.

* :class:`OneQueue` (option ``queue``): one queue, whose offset is one :class:`SourceOffset`
  (the offset format since the first release);
* :class:`ListedQueues` (option ``queues``): the listed queues, one offset per queue;
* :class:`QueuePattern` (option ``queuePattern``): every queue whose whole name matches, as
  queues come and go.

The stream reader (``source.py``) asks the selection, never the mode: which queues a trigger
reads (:meth:`QueueSelection.listing`), how to find one (:meth:`~QueueSelection.find`), whether a
checkpoint's offset still belongs to it (:meth:`~QueueSelection.keep`), whether it is gone
(:meth:`~QueueSelection.gone`), whether another query's lease keeps it out for now
(:meth:`~QueueSelection.busy_elsewhere`), and how offsets are written
(:meth:`~QueueSelection.encode`). A new mode is one new class here.

Named queues (one or listed) are what the user asked for: one that is missing fails the query
(or is created with createQueue), one deleted while the query runs fails it, and another
query's lease is waited for. A pattern's queues come and go: a missing or deleted one is left
out with a warning, one busy elsewhere joins once free.
"""

from __future__ import annotations

import functools
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import re2

from ..engine.core import queues
from ..engine.core.queues import QueueInfo
from ..engine.store import schema
from ..engine.store.session import Connection
from ..errors import ConfigError, QueueNotFoundError
from ..validate import queue_name
from .offset import MultiOffset, SourceOffset

# The options that choose the mode.
ONE = "queue"
LISTED = "queues"
MATCHING = "queuePattern"

# A queue the query reads, found (created with createQueue) or QueueNotFoundError.
Resolve = Callable[[str], QueueInfo]


class QueueStreamLike(Protocol):
    """What a selection needs of a queue's stream (``queue_stream.QueueStream``)."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> QueueInfo: ...

    def owns(self, o: SourceOffset) -> bool: ...

    def check(self, o: SourceOffset) -> None: ...

    def require_alive(self, s: SourceOffset) -> None: ...

    def lease_holder_elsewhere(self) -> str | None: ...


def lookup(conn: Connection, name: str) -> QueueInfo | None:
    """Queue ``name`` as it is now, never created; None when it does not exist."""
    try:
        return queues.get_queue(conn, name)
    except QueueNotFoundError:
        return None


@dataclass(frozen=True)
class QueueSelection(ABC):
    """Which queues a source reads (options ``queue``, ``queues``, ``queuePattern``)."""

    kind: ClassVar[str]  # the option that chose this mode
    several: ClassVar[bool]  # offsets name each queue (``{"queues": {...}}``)
    may_create: ClassVar[bool]  # createQueue can create its queues

    @property
    def names(self) -> tuple[str, ...]:
        """The queues named by the options (none for a pattern)."""
        return ()

    @abstractmethod
    def matches(self, name: str) -> bool:
        """``name`` is among the queues this query reads by its options now."""

    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def listing(self, conn: Connection) -> dict[str, QueueInfo | None]:
        """The queues a trigger reads, by name, with the queue as listed when the listing read
        the queue table (None: not listed, found by :meth:`find`)."""

    @abstractmethod
    def find(
        self, conn: Connection, name: str, listed: Mapping[str, QueueInfo | None], resolve: Resolve
    ) -> QueueInfo | None:
        """Queue ``name`` to read, or None when it is not read (gone, or no longer selected and
        missing). ``listed``: the last :meth:`listing`."""

    @abstractmethod
    def keep(self, qs: QueueStreamLike, o: SourceOffset) -> bool:
        """Whether the checkpoint's offset ``o`` belongs to the queue ``qs`` read now; False: the
        queue was deleted and created again since, and is read from its start. Raises
        CheckpointMismatchError where that may not happen."""

    @abstractmethod
    def gone(
        self, qs: QueueStreamLike, s: SourceOffset, listed: Mapping[str, QueueInfo | None]
    ) -> bool:
        """Whether queue ``qs``, read from ``s``, was deleted while the query runs and is left
        out; raises QueueNotFoundError (or CheckpointMismatchError) where it may not be."""

    def busy_elsewhere(self, qs: QueueStreamLike) -> str | None:
        """The consumer whose lease keeps ``qs`` out of this query for now; None: the queue is
        read (a named queue's lease is always waited for)."""
        return None

    @abstractmethod
    def decode(self, d: Mapping) -> dict[str, SourceOffset]:
        """The offsets, by queue, of the query offset ``d`` (CheckpointMismatchError when
        ``d`` was written by another mode)."""

    @abstractmethod
    def encode(self, offsets: Mapping[str, SourceOffset]) -> dict:
        """The query offset of ``offsets``, deterministic JSON for Spark."""

    @abstractmethod
    def report(self, lags: Mapping[str, dict[str, Any]]) -> dict | None:
        """What ``reportLatestOffset`` shows for the queues' lags."""

    def missing_on_replay(self, name: str, exc: QueueNotFoundError) -> QueueNotFoundError:
        """The error for queue ``name``, part of a batch run again after a restart, missing."""
        return exc


class _Named(QueueSelection):
    """Queues named by the options."""

    queues: tuple[str, ...]
    may_create: ClassVar[bool] = True

    @property
    def names(self) -> tuple[str, ...]:
        return self.queues

    def matches(self, name: str) -> bool:
        return name in self.queues

    def describe(self) -> str:
        return ", ".join(repr(n) for n in self.queues)

    def listing(self, conn: Connection) -> dict[str, QueueInfo | None]:
        return dict.fromkeys(self.queues)

    def find(
        self, conn: Connection, name: str, listed: Mapping[str, QueueInfo | None], resolve: Resolve
    ) -> QueueInfo | None:
        # A queue an older offset names that is no longer among the options: found, not created.
        return resolve(name) if name in self.queues else lookup(conn, name)

    def keep(self, qs: QueueStreamLike, o: SourceOffset) -> bool:
        if qs.name in self.queues:
            qs.check(o)
            return True
        return qs.owns(o)

    def gone(
        self, qs: QueueStreamLike, s: SourceOffset, listed: Mapping[str, QueueInfo | None]
    ) -> bool:
        qs.require_alive(s)
        return False


class _Several(QueueSelection):
    """Offsets of ``{"queues": {name: ...}}``, one entry per queue."""

    several: ClassVar[bool] = True

    def decode(self, d: Mapping) -> dict[str, SourceOffset]:
        return dict(MultiOffset.from_dict(d).offsets)

    def encode(self, offsets: Mapping[str, SourceOffset]) -> dict:
        return MultiOffset(dict(offsets)).to_dict()

    def report(self, lags: Mapping[str, dict[str, Any]]) -> dict | None:
        return {"queues": {n: lags[n] for n in sorted(lags)}}


@dataclass(frozen=True)
class OneQueue(_Named):
    """Option ``queue``: one queue; its offset is one :class:`SourceOffset`."""

    queues: tuple[str, ...]
    kind: ClassVar[str] = ONE
    several: ClassVar[bool] = False

    def decode(self, d: Mapping) -> dict[str, SourceOffset]:
        return {self.queues[0]: SourceOffset.from_dict(d)}

    def encode(self, offsets: Mapping[str, SourceOffset]) -> dict:
        (only,) = offsets.values()
        return only.to_dict()

    def report(self, lags: Mapping[str, dict[str, Any]]) -> dict | None:
        return next(iter(lags.values()), None)


@dataclass(frozen=True)
class ListedQueues(_Named, _Several):
    """Option ``queues``: the listed queues (a list of one too), one offset per queue."""

    queues: tuple[str, ...]
    kind: ClassVar[str] = LISTED

    def missing_on_replay(self, name: str, exc: QueueNotFoundError) -> QueueNotFoundError:
        return QueueNotFoundError(
            f"{exc}. It holds part of the batch this query runs again after a restart; to "
            f"go on without its messages, remove {name!r} from option 'queues'"
        )


@dataclass(frozen=True)
class QueuePattern(_Several):
    """Option ``queuePattern``: every queue whose whole name matches, listed at each trigger."""

    pattern: str
    kind: ClassVar[str] = MATCHING
    may_create: ClassVar[bool] = False

    def matches(self, name: str) -> bool:
        return compile_queue_pattern(self.pattern).fullmatch(name) is not None

    def describe(self) -> str:
        return f"queues matching {self.pattern!r}"

    def listing(self, conn: Connection) -> dict[str, QueueInfo | None]:
        schema.require_schema(conn)
        return {q.name: q for q in queues.list_queues(conn) if self.matches(q.name)}

    def find(
        self, conn: Connection, name: str, listed: Mapping[str, QueueInfo | None], resolve: Resolve
    ) -> QueueInfo | None:
        return listed.get(name)

    def keep(self, qs: QueueStreamLike, o: SourceOffset) -> bool:
        return qs.owns(o)

    def gone(
        self, qs: QueueStreamLike, s: SourceOffset, listed: Mapping[str, QueueInfo | None]
    ) -> bool:
        now = listed.get(qs.name)  # listed by this trigger
        return now is None or now.queue_id != qs.queue.queue_id

    def busy_elsewhere(self, qs: QueueStreamLike) -> str | None:
        """A matching queue that another streaming query consumes is not joined: waiting for
        the lease would fail this query on every restart; it joins once free."""
        return qs.lease_holder_elsewhere()


def queue_selection(queue: str, raw: Mapping[str, str]) -> QueueSelection:
    """Exactly one of option ``queue`` (already checked, ``""`` when absent), ``queues``
    (comma-separated names) and ``queuePattern`` (a regular expression); ``raw``: the options
    with lower-cased keys."""
    listed, pattern = raw.get("queues"), raw.get("queuepattern")
    given = [
        name
        for name, value in ((ONE, queue), (LISTED, listed), (MATCHING, pattern))
        if value is not None and str(value).strip()
    ]
    if len(given) != 1:
        raise ConfigError(
            "the cassieq source reads option 'queue' (one queue), 'queues' (comma-separated "
            "names) or 'queuePattern' (a regular expression over queue names): set exactly one"
            + (f", got {', '.join(given)}" if given else "")
        )
    if queue:
        return OneQueue((queue,))
    if listed is not None and str(listed).strip():
        names = [n.strip() for n in str(listed).split(",")]
        for n in names:
            queue_name(n, "queue name in option 'queues'")
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ConfigError(f"option 'queues' names {', '.join(doubled)} more than once")
        return ListedQueues(tuple(names))
    compile_queue_pattern(str(pattern))
    return QueuePattern(str(pattern))


@functools.lru_cache(maxsize=64)
def compile_queue_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2, whose matching takes time linear in the name, whatever the
    pattern (a backtracking matcher takes a minute on ``(a+)+`` against 31 characters, at every
    trigger). RE2's dialect is Python's without backreferences, lookaround and possessive
    quantifiers; it has POSIX classes (``[[:alpha:]]``) and repetition counts up to 1,000.
    Compiled once per pattern and process."""
    options = re2.Options()
    options.log_errors = False  # the ConfigError below says it, once
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern)  # Python's parser too: RE2 reads 'x{99999999999}' as text
        return re2.compile(pattern, options=options)
    except (re.error, re2.error, TypeError, ValueError, OverflowError, RecursionError) as exc:
        text = exc.args[0] if exc.args else exc
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        raise ConfigError(
            f"option 'queuePattern' must be a regular expression in RE2 syntax (Python's without "
            f"backreferences or lookaround, matched against whole queue names): {text}; "
            f"got {pattern!r}"
        ) from None
