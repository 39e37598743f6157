"""The fault-injection seam: how tests force the rare interleavings against the real Cassandra.

Nothing of Cassandra is faked. Every statement the engine sends goes through
:class:`~cassieq_spark.engine.store.session.Connection`, which asks this module whether to disturb it:

* ``lost_reply``: the statement runs, then the caller gets a timeout instead of the result
  (the coordinator applied it, the reply never arrived);
* ``retried``: the statement runs twice and the caller gets the second result (what the
  driver does when it re-sends a request after a lost reply);
* ``timeout_before``: the caller gets a timeout and the statement never runs;
* ``unavailable_after``: the statement runs, then the caller gets Unavailable (what Cassandra
  raises for a compare-and-set whose proposal was accepted when a replica is lost before the
  commit);
* ``refused_before``: the caller gets Overloaded and the statement never runs (what a
  coordinator that is shutting down answers: "Server is shutting down"). The driver's retry
  policy sends any statement on to the next node after it, so in production it reaches the
  engine only when every node tried was shutting down; the seam raises it for any statement
  it matches, on every attempt (a statement sent again passes the seam again).

Named *points* in the protocol code (``faults.point("sink.closed")``) let a test run its own
action between two steps: pause, run another consumer, kill a block. ``skew`` moves this
process's clock (:func:`cassieq_spark.engine.core.clock.now`).

``CASSIEQ_FAULTS=lost-reply`` switches on ``lost_reply`` for every conditional statement of
every process that inherits the variable (Spark workers included): each compare-and-set
applies and its caller must find out what happened by reading, as in production after a
coordinator timeout.

All of this is off unless a test turns it on; the cost on the hot path is one attribute read.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cassandra import ConsistencyLevel, OperationTimedOut, Unavailable, WriteTimeout
from cassandra.policies import WriteType
from cassandra.protocol import OverloadedErrorMessage

log = logging.getLogger(__name__)

ENV = "CASSIEQ_FAULTS"
LOST_REPLY = "lost_reply"
RETRIED = "retried"
TIMEOUT_BEFORE = "timeout_before"
UNAVAILABLE_AFTER = "unavailable_after"
REFUSED_BEFORE = "refused_before"
MODES = (LOST_REPLY, RETRIED, TIMEOUT_BEFORE, UNAVAILABLE_AFTER, REFUSED_BEFORE)


def is_conditional(cql: str) -> bool:
    """A lightweight transaction: ``... IF <condition>`` / ``IF NOT EXISTS`` (not DDL)."""
    return bool(_CONDITIONAL.search(cql)) and not cql.lstrip().upper().startswith(
        ("CREATE", "ALTER", "DROP")
    )


_CONDITIONAL = re.compile(r"\bIF\s+(NOT\s+EXISTS|EXISTS|\w+\s*(=|<|>|!=|IN\b))", re.IGNORECASE)


@dataclass
class Rule:
    mode: str
    match: Callable[[str], bool]
    times: int | None = 1  # None: every matching statement
    hits: int = 0

    def take(self, cql: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if not self.match(cql):
            return False
        self.hits += 1
        return True


@dataclass
class _State:
    rules: list[Rule] = field(default_factory=list)
    points: dict[str, Callable[..., None]] = field(default_factory=dict)
    skew: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def active(self) -> bool:
        return bool(self.rules)


state = _State()


def injected_timeout(cql: str) -> Exception:
    """What the driver raises when a reply does not come back in time."""
    if is_conditional(cql):
        return WriteTimeout(
            f"injected: reply lost ({cql[:60]}...)",
            consistency=None,
            required_responses=1,
            received_responses=0,
            write_type=WriteType.CAS,
        )
    if cql.lstrip().upper().startswith("SELECT"):
        return OperationTimedOut(f"injected: reply lost ({cql[:60]}...)")
    return WriteTimeout(
        f"injected: reply lost ({cql[:60]}...)",
        consistency=None,
        required_responses=1,
        received_responses=0,
        write_type=WriteType.SIMPLE,
    )


def injected_unavailable(cql: str) -> Exception:
    """What the driver raises when the coordinator reports too few live replicas."""
    return Unavailable(
        f"injected: unavailable after it ran ({cql[:60]}...)",
        consistency=ConsistencyLevel.SERIAL if is_conditional(cql) else None,
        required_replicas=2,
        alive_replicas=1,
    )


def injected_refusal(cql: str) -> Exception:
    """What a coordinator that is shutting down answers before it runs anything."""
    return OverloadedErrorMessage(
        0x1001, f"injected: Server is shutting down ({cql[:60]}...)", None
    )


def _matcher(match: str | Callable[[str], bool]) -> Callable[[str], bool]:
    if callable(match):
        return match
    pattern = re.compile(match, re.IGNORECASE | re.DOTALL)
    return lambda cql: bool(pattern.search(cql))


def inject(mode: str, match: str | Callable[[str], bool], times: int | None = 1) -> Rule:
    """Disturb statements whose CQL matches ``match`` (a regex or a predicate)."""
    if mode not in MODES:
        raise ValueError(f"fault mode must be one of {MODES}, got {mode!r}")
    rule = Rule(mode, _matcher(match), times)
    with state.lock:
        state.rules.append(rule)
    return rule


def on(point_name: str, action: Callable[..., None]) -> None:
    """Run ``action(**context)`` when the protocol code reaches ``point(point_name)``."""
    state.points[point_name] = action


def point(name: str, **context) -> None:
    """A named step of the protocol where a test may act. Free when nothing is registered."""
    action = state.points.get(name)
    if action is not None:
        log.debug("fault point %s reached", name)
        action(**context)


def set_skew(seconds: float) -> None:
    state.skew = float(seconds)


def reset() -> None:
    with state.lock:
        state.rules.clear()
        state.points.clear()
        state.skew = 0.0
    _from_env()


def take(cql: str) -> str | None:
    """The fault to apply to one execution of ``cql``, if any."""
    if not state.rules:
        return None
    with state.lock:
        for rule in state.rules:
            if rule.take(cql):
                log.info("fault %s injected into: %s", rule.mode, cql[:100])
                return rule.mode
    return None


def _from_env() -> None:
    spec = os.environ.get(ENV, "").strip().lower().replace("_", "-")
    if not spec:
        return
    if spec != "lost-reply":
        raise ValueError(f"{ENV}={spec!r}: the only mode for a whole run is 'lost-reply'")
    state.rules.append(Rule(LOST_REPLY, is_conditional, times=None))


_from_env()
