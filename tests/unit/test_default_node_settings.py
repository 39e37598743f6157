"""The node `make cassandra-up` and `make demo` start is durable and has the heap the product's
limits need; the test harness asks for the fast node explicitly."""

from __future__ import annotations

import inspect

import pytest

from cassieq_dev.local_cassandra import cassandra_endpoint, ensure_cassandra
from cassieq_dev.local_cassandra.cli import build_parser
from cassieq_dev.local_cassandra.config import default_heap

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "argv, fast",
    [([], False), (["--durable"], False), (["--fast"], True)],
)
def test_cassandra_up_is_durable_unless_asked_to_be_fast(argv: list[str], fast: bool) -> None:
    """N389: `make cassandra-up` ran the node that skips syncing its commitlog."""
    args = build_parser().parse_args(["up", *argv])
    assert args.fast is fast


def test_durable_and_fast_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--durable", "--fast"])


def test_make_demo_and_the_endpoint_default_to_durable() -> None:
    for function in (ensure_cassandra, cassandra_endpoint):
        assert inspect.signature(function).parameters["durable"].default is True


def test_a_lone_node_has_the_heap_the_largest_reads_need() -> None:
    """N389: 512M died under the largest batch read of 15 MiB messages."""
    assert default_heap(1) == "1G"
