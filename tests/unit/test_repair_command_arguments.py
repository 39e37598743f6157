"""The repair job's command line maps its flags onto ``RepairSettings`` (``repair_command.py``):
what the integration tests run in-process with those settings is what the flags ask for."""

from __future__ import annotations

from cassieq_spark.spark.repair_command import build_parser


def test_dry_run_and_limits_reach_the_settings():
    args = build_parser().parse_args(
        ["--queue", "a", "--dry-run", "--repair-timeout", "2.5", "--max-buckets", "7"]
    )
    assert (args.dry_run, args.repair_timeout, args.max_buckets) == (True, 2.5, 7)


def test_defaults_change_queues():
    args = build_parser().parse_args(["--queue", "a"])
    assert (args.dry_run, args.repair_timeout, args.max_buckets) == (False, None, None)
