"""What an operator sees of the engine's progress reports (``engine/core/progress.py``).

On a terminal, a progress bar (rich, from the ``[cli]`` extra) on stderr; anywhere else (a
pipe, a log file, a CI job), JSON lines on stderr, at most one a second per task plus its first
and last, so a command's own output on stdout (``put --ndjson``'s ids, the final JSON report)
stays clean. :func:`progress_sink` chooses: ``auto`` (the bar when stderr is a terminal and
rich is installed, else JSON lines), ``bar``, ``json`` or ``off``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, Any

from ..engine.core.progress import ProgressEvent, ProgressSink
from ..errors import ConfigError

__all__ = ["PROGRESS_MODES", "BarProgress", "JsonLinesProgress", "progress_sink"]

PROGRESS_MODES = ("auto", "bar", "json", "off")


class JsonLinesProgress:
    """One JSON object a line: ``{"progress": "redrive", "subject": ..., "done": ...}``."""

    def __init__(self, stream: IO[str] | None = None, interval: float = 1.0):
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def update(self, event: ProgressEvent) -> None:
        key = (event.task, event.subject)
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if not event.finished and last is not None and now - last < self.interval:
                return
            self._last[key] = now
            body = event.as_dict()
            line = {"progress": body.pop("task"), **body}
            self.stream.write(json.dumps(line) + "\n")
            self.stream.flush()

    def close(self) -> None:
        pass


class BarProgress:
    """A rich progress bar a task, on stderr; counters beside the bar."""

    def __init__(self, stream: IO[str] | None = None):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8.0f}/s"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[counts]}"),
            console=Console(file=stream if stream is not None else sys.stderr),
        )
        self._tasks: dict[tuple[str, str], Any] = {}
        self._started = False

    def update(self, event: ProgressEvent) -> None:
        key = (event.task, event.subject)
        counts = " ".join(f"{k}={v}" for k, v in event.counts.items())
        if key not in self._tasks:
            if not self._started:
                self._progress.start()
                self._started = True
            self._tasks[key] = self._progress.add_task(
                f"{event.task} {event.subject}", total=event.total, rate=0.0, counts=""
            )
        total = event.total
        if total is not None and event.done > total:
            total = event.done  # an estimate passed: the bar stays full, not past its end
        self._progress.update(
            self._tasks[key], completed=event.done, total=total, rate=event.rate, counts=counts
        )
        if event.finished:
            self._progress.update(self._tasks[key], total=event.done)
            if all(self._progress.tasks[i].finished for i in self._tasks.values()):
                self.close()

    def close(self) -> None:
        if self._started:
            self._progress.stop()
            self._started = False


def progress_sink(mode: str = "auto", stream: IO[str] | None = None) -> ProgressSink | None:
    """The sink for ``mode`` (see the module's docstring); None for ``off``."""
    if mode not in PROGRESS_MODES:
        raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)}, got {mode!r}")
    out = stream if stream is not None else sys.stderr
    if mode == "off":
        return None
    if mode == "json":
        return JsonLinesProgress(out)
    if mode == "auto" and not (hasattr(out, "isatty") and out.isatty()):
        return JsonLinesProgress(out)
    try:
        return BarProgress(out)
    except ImportError:
        if mode == "bar":
            raise ConfigError(
                "--progress bar needs rich: pip install 'cassieq-spark[cli]', or use "
                "--progress json"
            ) from None
        return JsonLinesProgress(out)
