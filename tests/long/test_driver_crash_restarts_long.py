"""The driver-crash run of tests/system/test_driver_crash_restarts.py with ten SIGKILLs instead
of four (tests/support/driver_crash.py): eleven Spark drivers one after the other, about seven
minutes."""

from __future__ import annotations

import pytest
from support.driver_crash import run_driver_kills

pytestmark = pytest.mark.spark


def test_ten_sigkilled_drivers_deliver_everything(
    queue_client, queue_name, cassieq_options, tmp_path
):
    run_driver_kills(queue_client, queue_name, cassieq_options, tmp_path, kills_wanted=10)
