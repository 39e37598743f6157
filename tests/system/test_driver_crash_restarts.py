"""The streaming source across SIGKILLs of its driver process (tests/support/driver_crash.py):
a driver in a process group of its own (its JVM and Python workers die with it) is killed three
times at random moments while a producer writes; a last run drains. Every produced id is
delivered, and a duplicate can only be the replay of the batch in flight (the same batch id
again). A system test: four Spark drivers start one after the other (about two minutes);
tests/long/test_driver_crash_restarts_long.py kills ten."""

from __future__ import annotations

import pytest
from support.driver_crash import run_driver_kills

pytestmark = pytest.mark.spark


def test_sigkill_driver_restarts_deliver_everything(
    queue_client, queue_name, cassieq_options, tmp_path
):
    run_driver_kills(queue_client, queue_name, cassieq_options, tmp_path, kills_wanted=3)
