"""``python -m cassieq_spark.local_cassandra``: see cli.py."""

import sys

from .cli import main

sys.exit(main())
