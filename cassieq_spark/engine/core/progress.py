"""How far a long operation is: the one progress reporter of the engine.

Redrive, move, purge, repair, bootstrap and bulk puts report through it. The engine only
counts; what an operator sees is a :class:`ProgressSink`'s business (a progress bar on a
terminal, JSON lines on stderr otherwise: ``cassieq_spark.observability.progress_view``).
Without a sink (``None``) reporting costs a method call and nothing else.

A report is a :class:`ProgressEvent`: the task's name, what it covers (``subject``: a queue,
a keyspace), units done so far, the total when known (an estimate may be passed: ``done``
can then exceed it), counters of the task's own (``moved``, ``taken_over``...) and whether
the task has finished. Events of one task come from one thread, in order; the first comes with
the first unit done (or the finish), so a task that fails before it did anything reports nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["ProgressEvent", "ProgressSink", "ProgressTask", "start_task"]


@dataclass(frozen=True)
class ProgressEvent:
    task: str
    subject: str
    done: int
    total: int | None
    unit: str
    elapsed: float
    counts: dict[str, int] = field(default_factory=dict)
    finished: bool = False

    @property
    def rate(self) -> float:
        """Units per second since the task started (0 in its first millisecond)."""
        return self.done / self.elapsed if self.elapsed > 0.001 else 0.0

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "task": self.task,
            "subject": self.subject,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "elapsed_seconds": round(self.elapsed, 3),
            "rate_per_second": round(self.rate, 1),
            "finished": self.finished,
        }
        out.update(self.counts)
        return out


class ProgressSink(Protocol):
    """Where progress goes; called on the thread that does the work, so it must be quick."""

    def update(self, event: ProgressEvent) -> None: ...


class ProgressTask:
    """One operation's progress: :meth:`advance` as units are done, :meth:`finish` once."""

    def __init__(
        self,
        sink: ProgressSink | None,
        task: str,
        subject: str,
        total: int | None = None,
        unit: str = "messages",
    ):
        self.sink = sink
        self.task = task
        self.subject = subject
        self.total = total
        self.unit = unit
        self.done = 0
        self.counts: dict[str, int] = {}
        self.finished = False
        self._started = time.monotonic()
        # Nothing is reported before the first unit or the finish: an operation refused before
        # it did anything (a bad setting found by its first step) prints its error alone.

    def _send(self) -> None:
        if self.sink is None:
            return
        self.sink.update(
            ProgressEvent(
                self.task,
                self.subject,
                self.done,
                self.total,
                self.unit,
                time.monotonic() - self._started,
                dict(self.counts),
                self.finished,
            )
        )

    def advance(self, n: int = 1, **counts: int) -> None:
        """``n`` more units done; ``counts`` are added to the task's own counters."""
        self.done += n
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self._send()

    def set_total(self, total: int | None) -> None:
        self.total = total
        self._send()

    def finish(self, **counts: int) -> None:
        """The task is over (``counts`` replace its counters); later calls do nothing."""
        if self.finished:
            return
        self.counts.update(counts)
        self.finished = True
        self._send()


def start_task(
    sink: ProgressSink | None,
    task: str,
    subject: str,
    total: int | None = None,
    unit: str = "messages",
) -> ProgressTask:
    """A task reporting to ``sink`` (None: reporting nowhere)."""
    return ProgressTask(sink, task, subject, total, unit)
