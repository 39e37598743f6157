"""The counted run of "no silent loss": three client processes put and consume 1,000 messages
(5,000 in the long tier)
on one queue while a share of every write's replies is lost (plain and conditional, after the
write applied) and a share of the timer writes of claims, visibility changes and give-backs is
held for up to three visibility timeouts (tests/support/counted_run.py). Repair runs
alongside, as a service would run it.

Counted from the processes' logs: every message whose put returned is delivered and acked at
least once; no message is enqueued twice; every delivery after a message's first is explained
by what happened to the delivery before it (a release, a stale or lost ack, a release whose
reply was lost), none follows an ack that returned True; nothing is stranded: the queue drains
to a backlog of 0 with nothing in flight, and repair's pointer reaches the reader pointer's
bucket. The seed is logged (``COUNTED_RUN_SEED`` replays its draws; which statement gets which
draw still depends on thread scheduling).
"""

from __future__ import annotations

import os

import pytest
from support.counted_run import count_a_run

pytestmark = [pytest.mark.system]

# 5,000 in the long tier (tests/long/test_counted_run_long.py, its log committed).
MESSAGES = int(os.environ.get("COUNTED_RUN_MESSAGES", "1000"))


def test_every_returned_put_is_delivered_and_nothing_is_stranded_through_late_timers_and_lost_replies(
    queue_client, cassieq_options, tmp_path
):
    count_a_run(queue_client, cassieq_options, tmp_path, MESSAGES)
