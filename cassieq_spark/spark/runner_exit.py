"""Giving the consumer leases back when Spark ends the streaming source's Python process.

PySpark runs a Python stream reader in a process of its own (the streaming source runner),
which calls the reader's ``stop()`` in a ``finally`` once its loop ends. When a query ends
(``query.stop()``, an ``AvailableNow`` run that is done, a failed batch) the JVM closes the
runner's socket and sends it SIGTERM a few milliseconds later, whose default action ends the
process at once: whether ``stop()`` had started or not, the consumer leases were not given
back, and for up to ``leaseTimeout`` after every query ended clients got QueueBusyError and a
query with another ``consumerId`` waited.

:class:`StopOnTerminate` makes SIGTERM in that process end it through ``stop()``: a SIGTERM
while ``stop()`` runs is ignored (the runner exits once it is done); one that comes first ends
the loop by raising, so that the runner's ``finally`` calls ``stop()``. It does nothing in any
other process (executors, the driver, a Python shell) or thread, and leaves a handler someone
else installed alone. A SIGKILL still ends the process at once; its leases then lapse, as a
crashed query's do. Each lease is given back by a compare-and-set on its owner and token, so
a release that comes late or twice changes nothing.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

# The module PySpark runs as ``__main__`` of the streaming source runner process.
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


def in_source_runner() -> bool:
    """Whether this is the main thread of PySpark's streaming source runner process."""
    if threading.current_thread() is not threading.main_thread():
        return False
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == RUNNER_MODULE


class StopOnTerminate:
    """SIGTERM of the streaming source runner, routed through the reader's ``stop()``.

    The handler never gives the leases back itself: the signal interrupts whatever the main
    thread was doing (a statement half sent, a lock of the driver held), and a release from
    inside the handler could wait forever on such a lock. Raising unwinds the interrupted call
    first, releasing what it held."""

    def __init__(self) -> None:
        self.stopping = False  # set by the reader's stop(): a SIGTERM now lets it finish
        self.installed = self._install()

    def _install(self) -> bool:
        if not in_source_runner() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        signal.signal(signal.SIGTERM, self._on_terminate)
        return True

    def _on_terminate(self, signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the JVM sends it twice
        if not self.stopping:
            raise SystemExit(128 + signum)
