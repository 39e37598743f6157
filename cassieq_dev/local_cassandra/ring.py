"""Joining nodes into one ring: retrying a join that missed the seed, waiting until every node
sees every other one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .config import CassandraError, NodeConfig
from .probe import query_peers
from .process import wipe_join_state

log = logging.getLogger(__name__)

T = TypeVar("T")
JOIN_ATTEMPTS = 3
JOIN_RETRY_PAUSE = 5.0


def start_joining(
    start: Callable[[], T],
    node: NodeConfig,
    is_running: Callable[[], bool],
    attempts: int = JOIN_ATTEMPTS,
) -> T:
    """``start()`` node, again from scratch if a joining node gave up on a busy seed.

    Seen on 2 loaded cores: "Unable to contact any seeds". Such a node never joined, so its data
    can go. The seed itself (node 1) and a node left running are never retried.
    """
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except CassandraError as exc:
            if node.index == 1 or attempt == attempts or is_running():
                raise
            log.warning("node %d failed to join (%s); retrying from scratch", node.index, exc)
            wipe_join_state(node)
            time.sleep(JOIN_RETRY_PAUSE)
    raise AssertionError("unreachable")


def wait_ring(
    addresses: Iterable[str], port: int, deadline: float, connect: dict[str, Any] | None = None
) -> None:
    """Wait until every address lists every other one in its system.peers."""
    running = set(addresses)
    while True:
        missing = {}
        for address in sorted(running):
            peers = query_peers(address, port, connect=connect)
            if peers is None or not running - {address} <= peers:
                missing[address] = running - {address} - (peers or set())
        if not missing:
            return
        if time.monotonic() > deadline:
            raise CassandraError(
                f"the local ring did not converge (peers missing per node: {missing}); "
                "see the nodes' logs/system.log"
            )
        time.sleep(0.5)
