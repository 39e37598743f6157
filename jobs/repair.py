"""The repair job's launcher for ``spark-submit`` from a checkout.

    spark-submit jobs/repair.py --queue NAME [--queue NAME2 ...] | --all-queues [...]

The job itself is ``cassieq_spark.spark.repair_command`` (installed as the ``cassieq-repair``
command, also ``python -m cassieq_spark.spark.repair_command``); its docstring and ``--help``
give the flags, the output and the exit statuses.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run from a checkout: make the package importable, unless it already is (installed, or shipped
# with --py-files on a cluster: that copy is the one the executors have too).
try:
    import cassieq_spark  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cassieq_spark.spark.repair_command import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
