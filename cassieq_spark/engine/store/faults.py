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
  it matches, on every attempt (a statement sent again passes the seam again);
* ``failed_before``: the caller gets WriteFailure and the statement never runs (what a
  coordinator answers when a replica fails to run the write, one dying under it).

Named *points* in the protocol code (``faults.point("sink.closed")``) let a test run its own
action between two steps: pause, run another consumer, kill a block. ``skew`` moves this
process's clock (:func:`cassieq_spark.engine.core.clock.now`).

``CASSIEQ_FAULTS=lost-reply`` switches on ``lost_reply`` for every conditional statement of
every process that inherits the variable (Spark workers included): each compare-and-set
applies and its caller must find out what happened by reading, as in production after a
coordinator timeout.

Lost replies at a rate, plain statements included. A rule may disturb only a share of the
statements it matches, drawn from its own seeded generator::

    inject(LOST_REPLY, is_write, times=None, rate=0.05)            # seed drawn and logged
    inject(LOST_REPLY, is_write, times=None, rate=0.05, seed=7)    # the same draws again
    inject(LOST_REPLY, r"^DELETE FROM", wait=0.6)   # the timeout reaches the caller 0.6 s on

and for a whole run, in every process that inherits the variable::

    CASSIEQ_FAULTS=lost-reply:SCOPE:RATE[:SEED[:WAIT]]     e.g. lost-reply:writes:0.05:7:0.5

``SCOPE`` is ``conditional`` (the compare-and-sets, as plain ``lost-reply``) or ``writes``
(every statement that changes something: inserts, updates, deletes and batches, conditional or
not; a plain write whose reply is lost has applied, and its caller gets the driver's
``WriteTimeout``). ``RATE`` is the share disturbed, in (0, 1]; ``WAIT`` the seconds before
the caller gets its error (``wait`` above, default 0). Each rule logs its seed at
WARNING when it is made (``fault seed S for lost_reply at rate R (pid P)``), so a failing run
can be replayed: a process given ``SEED`` draws the same sequence again; which statement gets
which draw still depends on thread scheduling. Without ``SEED`` each process draws its own.

All of this is off unless a test turns it on; the cost on the hot path is one attribute read.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cassandra import ConsistencyLevel, OperationTimedOut, Unavailable, WriteFailure, WriteTimeout
from cassandra.policies import WriteType
from cassandra.protocol import OverloadedErrorMessage

log = logging.getLogger(__name__)

ENV = "CASSIEQ_FAULTS"
LOST_REPLY = "lost_reply"
RETRIED = "retried"
TIMEOUT_BEFORE = "timeout_before"
UNAVAILABLE_AFTER = "unavailable_after"
REFUSED_BEFORE = "refused_before"
FAILED_BEFORE = "failed_before"
MODES = (LOST_REPLY, RETRIED, TIMEOUT_BEFORE, UNAVAILABLE_AFTER, REFUSED_BEFORE, FAILED_BEFORE)


def is_write(cql: str) -> bool:
    """A statement that changes something (insert, update, delete, batch), conditional or not."""
    return cql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE", "BEGIN", "BATCH"))


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
    rate: float = 1.0  # the share of matching statements disturbed
    draws: random.Random | None = None  # seeded; used only when rate < 1
    wait: float = 0.0  # seconds the caller waits before its error (the driver's timeout)

    def take(self, cql: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if not self.match(cql):
            return False
        if self.draws is not None and self.draws.random() >= self.rate:
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


def injected_write_failure(cql: str) -> Exception:
    """What the driver raises when a replica fails to run a write (one dying under it)."""
    return WriteFailure(
        f"injected: replica failed to execute the write ({cql[:60]}...)",
        consistency=ConsistencyLevel.ONE,
        required_responses=1,
        received_responses=0,
        failures=1,
        write_type=WriteType.SIMPLE,
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


def _rule(
    mode: str,
    match: str | Callable[[str], bool],
    times: int | None,
    rate: float,
    seed: int | None,
    wait: float = 0.0,
) -> Rule:
    if mode not in MODES:
        raise ValueError(f"fault mode must be one of {MODES}, got {mode!r}")
    if not 0 < rate <= 1:
        raise ValueError(f"fault rate must be in (0, 1], got {rate!r}")
    draws = None
    if rate < 1:
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        draws = random.Random(seed)
        log.warning("fault seed %d for %s at rate %g (pid %d)", seed, mode, rate, os.getpid())
    return Rule(mode, _matcher(match), times, rate=rate, draws=draws, wait=wait)


def inject(
    mode: str,
    match: str | Callable[[str], bool],
    times: int | None = 1,
    *,
    rate: float = 1.0,
    seed: int | None = None,
    wait: float = 0.0,
) -> Rule:
    """Disturb statements whose CQL matches ``match`` (a regex or a predicate, e.g.
    :func:`is_write`): each matching one with probability ``rate`` (seeded by ``seed``, drawn
    and logged when None), until ``times`` were disturbed (None: no limit). ``wait``: the
    caller gets its error that many seconds after the statement ran (or would have), as a
    request timeout comes late; only the calling thread waits, not the seam."""
    rule = _rule(mode, match, times, rate, seed, wait)
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
    rule = taken(cql)
    return None if rule is None else rule.mode


def taken(cql: str) -> Rule | None:
    """The rule that disturbs one execution of ``cql``, if any (its ``mode`` and ``wait``)."""
    if not state.rules:
        return None
    with state.lock:
        for rule in state.rules:
            if rule.take(cql):
                log.info("fault %s injected into: %s", rule.mode, cql[:100])
                return rule
    return None


SCOPES: dict[str, Callable[[str], bool]] = {"conditional": is_conditional, "writes": is_write}


def parse_env(spec: str) -> tuple[Callable[[str], bool], float, int | None, float] | None:
    """``CASSIEQ_FAULTS``'s value as (matcher, rate, seed, wait); None when empty (see the
    module docstring for the forms)."""
    spec = spec.strip().lower().replace("_", "-")
    if not spec:
        return None
    usage = (
        f"{ENV}={spec!r}: use 'lost-reply' or 'lost-reply:SCOPE:RATE[:SEED[:WAIT]]' "
        f"with SCOPE one of {sorted(SCOPES)}, RATE in (0, 1], SEED an integer, WAIT seconds >= 0"
    )
    head, *rest = spec.split(":")
    if head != "lost-reply" or len(rest) == 1 or len(rest) > 4:
        raise ValueError(usage)
    if not rest:
        return is_conditional, 1.0, None, 0.0
    if rest[0] not in SCOPES:
        raise ValueError(usage)
    try:
        rate = float(rest[1])
        seed = int(rest[2]) if len(rest) >= 3 else None
        wait = float(rest[3]) if len(rest) == 4 else 0.0
    except ValueError:
        raise ValueError(usage) from None
    if not 0 < rate <= 1 or not wait >= 0:
        raise ValueError(usage)
    return SCOPES[rest[0]], rate, seed, wait


def _from_env() -> None:
    parsed = parse_env(os.environ.get(ENV, ""))
    if parsed is None:
        return
    match, rate, seed, wait = parsed
    state.rules.append(_rule(LOST_REPLY, match, None, rate, seed, wait))


_from_env()
