"""Accounts as a namespace of queue names.

An HTTP queue ``q`` of account ``acct`` is the ordinary engine queue ``acct.q``: Spark, the
Python client and the CLI reach it under that name, and a queue the client creates as
``acct.q`` is queue ``q`` of account ``acct`` over HTTP. Account names may not contain a dot,
so the first dot of an engine name always splits it back into account and queue; queue names
keep the original's alphabet (``[a-zA-Z_\\-0-9.]+``).
"""

from __future__ import annotations

import re

from ..validate import QUEUE_NAME_RE

# The original's pattern, as its error messages quote it.
ORIGINAL_PATTERN = r"[a-zA-Z_\-0-9\.]+"
ACCOUNT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}")
QUEUE_RE = re.compile(ORIGINAL_PATTERN)
KEY_NAME_RE = re.compile(r"[a-zA-Z_\-0-9\.]{1,64}")
SEPARATOR = "."


def account_ok(name: str) -> bool:
    """An account name: a letter or digit, then up to 63 letters, digits, ``_`` or ``-``."""
    return ACCOUNT_RE.fullmatch(name) is not None


def queue_ok(account: str, name: str) -> bool:
    """A queue name of the original's alphabet whose engine name fits the engine's limit."""
    return (
        QUEUE_RE.fullmatch(name) is not None
        and QUEUE_NAME_RE.fullmatch(engine_name(account, name)) is not None
    )


def engine_name(account: str, queue: str) -> str:
    """The engine queue that holds HTTP queue ``queue`` of ``account``."""
    return f"{account}{SEPARATOR}{queue}"


def prefix(account: str) -> str:
    """Every engine queue of ``account`` starts with this, and no other queue does."""
    return account + SEPARATOR


def split(engine: str) -> tuple[str, str] | None:
    """(account, queue) of an engine queue name, or None for a queue of no account."""
    account, sep, queue = engine.partition(SEPARATOR)
    if not sep or not account_ok(account) or not queue:
        return None
    return account, queue
