"""Running a command line's ``main`` in the test process and reading its one-line answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

# Connection flags towards a port nothing listens on: a check that does not come before
# connecting fails the test with a connection error instead of touching a real node.
NOWHERE = ["--contact-points", "127.0.0.1", "--port", "1"]


def run_main(
    main: Callable[[Sequence[str]], int], argv: Sequence[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    """``main(argv)``'s exit status (argparse's SystemExit too) and its stderr lines."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err.strip().splitlines()
