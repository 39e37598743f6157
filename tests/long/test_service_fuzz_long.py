"""The long search of the service's fuzzer: the fuzz tests of
``tests/integration/test_service_fuzzed_against_its_api_document.py`` with many more examples
per operation and longer stateful scenarios, and a seed of its own each run (printed; set
``CASSIEQ_FUZZ_SEED`` to repeat one). Its output is written to ``service_fuzz_long.log`` beside
this file, the record of the last long run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.long

HERE = Path(__file__).parent
EXAMPLES = os.environ.get("CASSIEQ_FUZZ_LONG_EXAMPLES", "200")
STEPS = os.environ.get("CASSIEQ_FUZZ_LONG_STEPS", "15")


def test_the_long_fuzz_finds_no_5xx_and_no_answer_off_the_document() -> None:
    seed = os.environ.get("CASSIEQ_FUZZ_SEED") or str(int(time.time()))
    env = {
        **os.environ,
        "CASSIEQ_FUZZ_SEED": seed,
        "CASSIEQ_FUZZ_EXAMPLES": EXAMPLES,
        "CASSIEQ_FUZZ_STEPS": STEPS,
    }
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-s",
            "-q",
            "-p",
            "no:cacheprovider",
            str(HERE.parent / "integration" / "test_service_fuzzed_against_its_api_document.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=6 * 3600,
    )
    took = time.monotonic() - started
    record = (
        f"seed {seed}, {EXAMPLES} examples per operation, stateful scenarios of at most {STEPS} "
        f"steps, {took:.0f} s, exit {proc.returncode}\n\n{proc.stdout}\n{proc.stderr}"
    )
    (HERE / "service_fuzz_long.log").write_text(record)
    assert proc.returncode == 0, record[-5000:]
