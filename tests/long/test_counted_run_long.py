"""The counted run of issue 44 at its full size: 5,000 messages through three client processes
with 5% of write replies lost and 5% of timer writes held up to three visibility timeouts
(tests/support/counted_run.py; the 1,000-message variant runs in the system tier). The
summary of each run (seed, counts, why each message was delivered again) is appended to
tests/long/logs/counted_run_long.log, which is committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counted_run import count_a_run

pytestmark = [pytest.mark.long]

LOG = Path(__file__).parent / "logs" / "counted_run_long.log"


def test_five_thousand_messages_through_late_timers_and_lost_replies_strand_nothing(
    queue_client, cassieq_options, tmp_path
):
    count_a_run(queue_client, cassieq_options, tmp_path, 5000, record=LOG)
