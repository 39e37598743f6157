"""No module imports another module's private names.

A name that starts with one underscore belongs to its module: the module may change or drop it
without looking further. A sibling that needs the piece gets it under a public name in the
module that owns the concept. Private *modules* of a package (``from . import _impl``) are
allowed: the package is then the owner.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("cassieq_spark", "cassieq_dev", "jobs", "bench", "tests")


def _is_module(package_dir: Path, name: str) -> bool:
    return (package_dir / f"{name}.py").is_file() or (package_dir / name / "__init__.py").is_file()


def _target_dir(path: Path, node: ast.ImportFrom) -> Path | None:
    """The folder that ``from X import name`` looks for submodules in, if X is in the tree."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        bases = [base]
    else:
        bases = [ROOT, ROOT / "tests"]  # the tests import their helpers as ``support.*``
    parts = (node.module or "").split(".") if node.module else []
    for base in bases:
        target = base.joinpath(*parts)
        if target.is_dir():
            return target
    return None


def private_imports(path: Path, source: str) -> list[str]:
    """``file:line: module: name`` for each private name imported from another module."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
            continue
        package_dir = _target_dir(path, node)
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__"):
                continue
            if package_dir is not None and _is_module(package_dir, name):
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module or '.'}: {name}")
    return found + private_attributes(path, tree)


def private_attributes(path: Path, tree: ast.Module) -> list[str]:
    """``module._name`` where ``module`` was imported from this tree by ``from X import module``
    (a private name reached through the module instead of imported)."""
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            package_dir = _target_dir(path, node)
            for alias in node.names:
                if package_dir is not None and _is_module(package_dir, alias.name):
                    modules[alias.asname or alias.name] = alias.name
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(
                f"{path.relative_to(ROOT)}:{node.lineno}: {modules[node.value.id]}: {node.attr}"
            )
    return found


def _modules() -> list[Path]:
    found = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(found) > 50, f"too few modules under {FOLDERS}: wrong ROOT {ROOT}"
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    bad = [line for p in _modules() for line in private_imports(p, p.read_text(encoding="utf-8"))]
    assert not bad, "private names imported from another module (give them a public home):\n" + (
        "\n".join(bad)
    )


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("from .consume.consumer import _RESTORE, Consumer\n", ["_RESTORE"]),
        ("from cassieq_spark.spark.sink import _TaskWrite\n", ["_TaskWrite"]),
        ("from ..memory import _cmdline as cmdline\n", ["_cmdline"]),
        ("from . import clock, _private_helper\n", ["_private_helper"]),
        ("from support import cluster_faults\ncluster_faults._described(e)\n", ["_described"]),
        ("from .core import monoton\nmonoton._last_next.clear()\n", ["_last_next"]),
        ("from .core import monoton\nmonoton.counter(c, q)\n", []),
        ("from .consume.consumer import Consumer\n", []),
        ("from __future__ import annotations\nfrom .x import __version__\n", []),
    ],
)
def test_the_check_sees_a_private_import(source: str, flagged: list[str]) -> None:
    path = ROOT / "cassieq_spark" / "engine" / "example.py"
    names = [line.rsplit(": ", 1)[1] for line in private_imports(path, source)]
    assert names == flagged


def test_a_private_submodule_of_a_package_may_be_imported(tmp_path: Path) -> None:
    # A package's private module is the package's own business (httpx's ``_client.py`` style).
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_impl.py").write_text("")
    assert private_imports(package / "mod.py", "from . import _impl\n") == []
