"""No test module imports another test module: a helper or fixture two test files share lives in
tests/support/ under a public name. Importing a test module runs its module-level code and, with
pytest's rootdir imports, makes its tests and fixtures depend on the order files were collected."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module name) of every import statement of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from a import b`: b may be a module (`from support import test_x`)
            found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
    return found


def imports_of_test_modules(path: Path) -> list[str]:
    """The imports of ``path`` that name a test module (``test_*`` as any part of the name)."""
    return [
        f"{path.name}:{line}: imports {name}"
        for line, name in imported_modules(path)
        if any(part.startswith("test_") for part in name.split("."))
    ]


def test_no_test_module_imports_another():
    offenders = [
        f"{path.parent.relative_to(TESTS)}/{hit}"
        for path in sorted(TESTS.rglob("*.py"))
        for hit in imports_of_test_modules(path)
    ]
    assert not offenders, (
        "a test module must not import another; move the shared helper or fixture to "
        "tests/support/ and import it from there:\n" + "\n".join(offenders)
    )


def test_the_check_finds_an_import_of_a_test_module(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "from test_source_stream import start\nimport support.test_x\nfrom support import queues\n"
    )
    assert imports_of_test_modules(sample) == [
        "test_sample.py:1: imports test_source_stream.start",
        "test_sample.py:2: imports support.test_x",
    ]
