"""The package declares ranges, not pins; the ranges are true at both ends.

- At the lowest versions the ranges allow (uv's ``--resolution lowest-direct`` over the core and
  the ``server``, ``cli``, ``metrics``, ``otel`` and ``test`` extras), the unit tier passes and
  the service and client smoke test (tests/support/service_smoke.py) runs against the real
  Cassandra.
- The wheel's ``[server]`` extra installs beside an application that pins the lowest, and one
  that pins the newest, versions the ranges allow of starlette, cryptography, greenlet and
  opentelemetry-api (what FastAPI, cryptography users, SQLAlchemy and an OpenTelemetry SDK
  bring), and the smoke test runs there, from outside the checkout.

The pins the project itself is tested with are in constraints.txt (``make setup``, CI).
The Spark stack (pyspark, pyarrow, pandas) of the lowest venv is the project venv's: the unit
tier imports the connector, and the ``[spark]`` extra's ranges are not what this proves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
SMOKE = ROOT / "tests" / "support" / "service_smoke.py"
CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("CASSIEQ_")
}
RANGE_EXTRAS = "server,cli,metrics,otel,test"
APPLICATION = ("starlette", "cryptography", "greenlet", "opentelemetry-api")


def _run(*cmd: str | Path, cwd: Path = ROOT, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=CLEAN_ENV, timeout=600
    )
    if ok:
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def _requirements() -> dict[str, Requirement]:
    """Every dependency of the core and the extras, by normalised name (the last one wins)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    return {re.sub(r"[-_.]+", "-", (r := Requirement(s)).name.lower()): r for s in lines}


def _lower_bound(req: Requirement) -> str:
    (low,) = [s.version for s in req.specifier if s.operator == ">="]
    return low


def _compiled(lines: list[str], where: Path, resolution: str) -> dict[str, str]:
    """name -> version that uv resolves ``lines`` to with ``resolution``."""
    (where / "in.txt").write_text("\n".join(lines) + "\n")
    _run(
        UV, "pip", "compile", "--quiet", "--python", sys.executable, "--resolution", resolution,
        where / "in.txt", "-o", where / "out.txt",
    )  # fmt: skip
    pins = re.findall(r"(?m)^([A-Za-z0-9][\w.-]*)==(\S+)", (where / "out.txt").read_text())
    return {re.sub(r"[-_.]+", "-", n.lower()): v for n, v in pins}


def _venv(where: Path) -> Path:
    _run(UV, "venv", "--quiet", "--python", sys.executable, where)
    return where / "bin" / "python"


def _install(python: Path, *args: str | Path) -> None:
    _run(UV, "pip", "install", "--quiet", "--python", python, *args)


def _smoke(python: Path, cassandra, cwd: Path) -> dict[str, str]:
    keyspace = f"ranges_{uuid.uuid4().hex[:12]}"
    try:
        done = _run(
            python, SMOKE, ",".join(cassandra.contact_points), str(cassandra.port), keyspace,
            cwd=cwd, ok=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
        said = json.loads(done.stdout.strip().splitlines()[-1])
        assert said["ok"] is True
        return {re.sub(r"[-_.]+", "-", k.lower()): v for k, v in said["versions"].items()}
    finally:
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(UV, "build", "--quiet", "--wheel", "--out-dir", out, ROOT)
    (built,) = out.glob("cassieq_spark-*-py3-none-any.whl")
    return built


def test_the_package_declares_ranges_and_constraints_pin_them() -> None:
    pinned = [str(r) for r in _requirements().values() if "==" in str(r.specifier)]
    assert not pinned, f"exact pins in pyproject.toml (they belong in constraints.txt): {pinned}"
    constraints = (ROOT / "constraints.txt").read_text()
    for name in ("cassandra-driver", "starlette", "uvicorn", "cryptography", "greenlet"):
        assert re.search(rf"(?im)^{name}==\S+$", constraints.replace("_", "-")), name


def test_the_lowest_versions_the_ranges_allow_pass_the_unit_tier_and_the_smoke_test(
    cassandra, tmp_path: Path
) -> None:
    lowest = _compiled(
        [f"cassieq-spark[{RANGE_EXTRAS}] @ {ROOT.as_uri()}"], tmp_path, "lowest-direct"
    )
    requirements = _requirements()
    for name in ("cassandra-driver", "greenlet", "starlette", "uvicorn", "cryptography"):
        assert Version(lowest[name]) == Version(_lower_bound(requirements[name])), name
    python = _venv(tmp_path / "venv")
    (tmp_path / "lowest.txt").write_text(
        "".join(f"{n}=={v}\n" for n, v in lowest.items() if n != "cassieq-spark")
    )
    # The package itself too (its `cassieq` script), from the checkout.
    _install(python, "--no-deps", "-r", tmp_path / "lowest.txt", ROOT)
    # The Spark stack from the project venv, after this venv's own site-packages: a path line
    # adds the directory but runs none of its .pth files (the checkout's editable install).
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
    (Path(purelib.stdout.strip()) / "zz_spark_stack.pth").write_text(
        sysconfig.get_path("purelib") + "\n"
    )

    unit = _run(
        python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "unit", "-n", "2",
        "tests/unit",
    )  # fmt: skip
    assert re.search(r"\d+ passed", unit.stdout), unit.stdout[-2000:]

    seen = _smoke(python, cassandra, ROOT)
    for name in ("cassandra-driver", "greenlet", "starlette", "uvicorn", "cryptography"):
        assert Version(seen[name]) == Version(lowest[name]), (name, seen)


@pytest.mark.parametrize("end", ["lowest", "newest"])
def test_the_server_extra_installs_beside_an_application_pinning_either_end_of_the_ranges(
    end: str, wheel: Path, cassandra, tmp_path: Path
) -> None:
    requirements = _requirements()
    if end == "lowest":
        pins = {name: _lower_bound(requirements[name]) for name in APPLICATION}
    else:
        newest = _compiled([str(requirements[name]) for name in APPLICATION], tmp_path, "highest")
        pins = {name: newest[name] for name in APPLICATION}
    python = _venv(tmp_path / "venv")
    _install(python, f"{wheel}[server]", *(f"{n}=={v}" for n, v in pins.items()))
    outside = tmp_path / "application"
    outside.mkdir()
    seen = _smoke(python, cassandra, outside)
    assert {n: Version(seen[n]) for n in APPLICATION} == {n: Version(v) for n, v in pins.items()}
