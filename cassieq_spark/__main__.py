"""``python -m cassieq_spark``: the ``cassieq`` command."""

import sys

from .cli import main

sys.exit(main())
