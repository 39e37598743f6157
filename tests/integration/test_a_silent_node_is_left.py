"""A node that goes silent (cut off by the network: no reset, no reply) is marked down within
``2 * HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT`` of its last reply, and used again once it
answers. With the driver's defaults (a heartbeat every 30 s, 30 s to answer it) that took up
to a minute, and every request sent to the silent node waited out the request timeout.

The node is the real test node; silence is made by a byte pump of this test between the
client and the node that stops forwarding (and keeps both sockets open), the way a packet
filter dropping everything looks to the driver.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid

import pytest

from cassieq_spark import QueueClient
from cassieq_spark.engine.store.session import HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT

pytestmark = pytest.mark.integration

DETECTION_BOUND_S = 2 * HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT + 8.0  # 8 s for a loaded machine


class SilenceablePump:
    """Listens on a free loopback port and pumps each connection to ``upstream``; while
    ``silent`` it reads and drops whatever either side sends."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.silent = threading.Event()
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.silent.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed.set()
        for s in self.sockets:
            s.close()


def test_a_silent_node_is_marked_down_within_the_heartbeat_bound_and_used_again(
    cassandra, queue_client
):
    pump = SilenceablePump((cassandra.contact_points[0], cassandra.port))
    options = {
        "contactPoints": "127.0.0.1",
        "port": str(pump.port),
        "keyspace": queue_client.config.keyspace,
    }
    queue = f"silent_{uuid.uuid4().hex[:8]}"
    try:
        with QueueClient.from_options(options) as client:
            client.create_queue(queue)
            client.put(queue, b"before")
            (host,) = client.conn.cluster.metadata.all_hosts()
            assert host.is_up

            pump.silent.set()
            silent_at = time.monotonic()
            while host.is_up and time.monotonic() - silent_at < 90:
                time.sleep(0.2)
            detected_s = time.monotonic() - silent_at
            assert not host.is_up, "the silent node was never marked down"
            assert detected_s <= DETECTION_BOUND_S, (
                f"the silent node was marked down after {detected_s:.1f} s "
                f"(bound {DETECTION_BOUND_S:.0f} s)"
            )

            pump.silent.clear()
            back_at = time.monotonic()
            while not host.is_up and time.monotonic() - back_at < 60:
                time.sleep(0.2)
            assert host.is_up, "the node was not used again after it answered"
            client.put(queue, b"after")
            got = sorted(m.payload for m in client.get_many(queue, 10, visibility_timeout=30))
            assert got == [b"after", b"before"]
            print(f"silent node marked down after {detected_s:.1f} s")
    finally:
        pump.close()
