"""The receipts of ``ack_many`` / ``change_visibility_many`` are taken from their iterable no
further than one past the per-call limit: an endless iterator (``itertools.repeat``) used to
be drained into a list first, growing memory until a MemoryError or the OOM killer. The call
runs in a child process with a memory cap and a timeout, so a regression fails the test
instead of the run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cassieq_spark.engine.consume.batch_ack import receipts_list, visibility_pairs
from cassieq_spark.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "row, call",
    [
        ("N50", "receipts_list(itertools.repeat('r1junk'), 'pop_receipts', 'receipts')"),
        ("N50-pairs", "visibility_pairs(itertools.repeat(('r1junk', 5)))"),
    ],
)
def test_an_endless_iterable_of_receipts_is_refused_without_draining_it(
    row: str, call: str
) -> None:
    code = f"""
        import itertools, resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from cassieq_spark.engine.consume.batch_ack import receipts_list, visibility_pairs
        from cassieq_spark.errors import ConfigError
        try:
            {call}
        except ConfigError as exc:
            print("ConfigError", exc)
        """
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("still running after 30 s: the iterator is being drained")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "has more than 1000 entries; at most 1000 per call" in done.stdout, done.stdout


def test_a_sized_argument_still_names_its_length() -> None:
    with pytest.raises(ConfigError, match="has 1001 entries; at most 1000 per call"):
        receipts_list(["r"] * 1001, "pop_receipts", "receipts")
    assert receipts_list(iter(["a", "b"]), "pop_receipts", "receipts") == ["a", "b"]
    assert len(visibility_pairs([("r", 1)] * 1000)) == 1000
