"""``python -m cassieq_dev.local_cassandra``: see cli.py."""

import sys

from .cli import main

sys.exit(main())
