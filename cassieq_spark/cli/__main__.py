"""``python -m cassieq_spark.cli``: the ``cassieq`` command."""

import sys

from .main import main

sys.exit(main())
