"""The ``cassieq`` command, in process against the real Cassandra: a bad ``put --ndjson`` line
past the first put's chunk puts nothing, and a visibility timeout too short for a receive to
hand its messages out is refused by ``update-queue``."""

from __future__ import annotations

import io
import json
import sys

import pytest

from cassieq_spark import cli


@pytest.fixture
def cassieq(monkeypatch, cassieq_options, capsys):
    """``cassieq(*argv, stdin=b"")``: (status, stdout, stderr) of the command, in process."""
    monkeypatch.setenv("CASSIEQ_CONTACT_POINTS", cassieq_options["contactPoints"])
    monkeypatch.setenv("CASSIEQ_PORT", cassieq_options["port"])
    monkeypatch.setenv("CASSIEQ_KEYSPACE", cassieq_options["keyspace"])

    def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        status = cli.main(list(argv))
        out = capsys.readouterr()
        return status, out.out, out.err

    return run


def test_put_ndjson_puts_nothing_when_line_1001_is_over_the_queue_limit(
    cassieq, queue_client, queue_name
):
    queue_client.create_queue(queue_name, max_payload_bytes=10)
    lines = [json.dumps({"payload": "ok"}) for _ in range(1000)]
    lines.append(json.dumps({"payload": "x" * 50}))
    status, out, err = cassieq("put", queue_name, "--ndjson", stdin="\n".join(lines).encode())
    assert status == cli.EXIT_USAGE
    # The command's own error is its last line (a handler another test left on a stream
    # closed since may print a logging error before it in this shared process).
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("cassieq: error: stdin line 1001: payload has 50 bytes;")
    ), err
    assert out == ""
    assert queue_client.stats(queue_name)["enqueued"] == 0


def test_update_queue_refuses_a_visibility_timeout_shorter_than_a_receive(
    cassieq, queue_client, queue_name
):
    queue_client.create_queue(queue_name, visibility_timeout=30)
    status, _, err = cassieq("update-queue", queue_name, "--visibility-timeout", "1e-9")
    assert status == cli.EXIT_USAGE
    assert "visibility timeout must be at least 0.5 seconds, got 1e-09" in err
    assert queue_client.get_queue(queue_name).visibility_timeout == 30
