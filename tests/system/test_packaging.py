"""`make dist` output installs and runs outside the checkout (built as `make dist` builds it).

The wheel holds runtime code only, its core installs without PySpark and gives a working
client and `cassieq`, and each extra's feature says what to install when it is missing. With
the `[spark]` extra the connector works: tests/system/test_spark_cluster.py ships this wheel to
a Spark standalone cluster and runs the sink, the source and the repair job from it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import uuid
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cassieq_spark"
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(
    *cmd: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    if ok:
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(sdist, wheel, the build's output), built once for the module."""
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    (sdist,) = out.glob("cassieq_spark-*.tar.gz")
    (wheel,) = out.glob("cassieq_spark-*-py3-none-any.whl")
    return sdist, wheel, built.stdout + built.stderr


def _venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(where)
    return where / "bin" / "python"


def test_wheel_builds_without_warnings_and_holds_runtime_code_only(dist) -> None:
    sdist, wheel, output = dist
    assert "Deprecat" not in output and "BuildBackendWarning" not in output, output[-3000:]
    assert sdist.stat().st_size > 0
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"cassieq_spark", "pyspark_cassieq"}, tops
    assert not [n for n in names if "local_cassandra" in n or "local_spark" in n], names
    assert "cassieq_spark/py.typed" in names
    assert "cassieq_spark/spark/repair_command.py" in names
    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(info).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    requires = re.findall(r"^Requires-Dist: (.*)$", metadata, re.M)
    core = sorted(
        r.split("=")[0].split(">")[0].split("<")[0] for r in requires if "extra ==" not in r
    )
    assert core == ["cassandra-driver", "google-re2", "greenlet"], requires
    assert any(r.startswith("pyspark") and 'extra == "spark"' in r for r in requires), requires
    for extra, dep in (("cli", "rich"), ("demo", "matplotlib")):
        assert any(r.startswith(dep) and f'extra == "{extra}"' in r for r in requires), requires
    scripts = zipfile.ZipFile(wheel).read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "cassieq = cassieq_spark.cli:main" in scripts
    assert "cassieq-repair = cassieq_spark.spark.repair_command:main" in scripts


def test_the_package_reads_nothing_from_proc() -> None:
    """The runtime package runs on any OS: process facts come from psutil, in the dev launchers."""
    readers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "/proc/" in node.value or node.value == "/proc":
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.JoinedStr) and any(
                isinstance(v, ast.Constant) and "/proc" in str(v.value) for v in node.values
            ):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not readers, readers


def test_the_core_without_pyspark_runs_the_client_and_cassieq(
    dist, tmp_path: Path, cassandra
) -> None:
    """A venv with the wheel and its core dependencies only (pip resolves them)."""
    _, wheel, _ = dist
    python = _venv(tmp_path / "venv")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel, env=CLEAN_ENV)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for absent in ("pyspark", "pyarrow", "pandas", "rich", "matplotlib"):
        probe = _run(python, "-c", f"import {absent}", cwd=outside, env=CLEAN_ENV, ok=False)
        assert probe.returncode != 0, f"{absent} is installed with the core"

    keyspace = f"pkg_{uuid.uuid4().hex[:12]}"
    flags = [
        "--contact-points", ",".join(cassandra.contact_points),
        "--port", str(cassandra.port),
        "--keyspace", keyspace,
    ]  # fmt: skip
    cassieq = tmp_path / "venv" / "bin" / "cassieq"
    try:
        version = _run(cassieq, "--version", cwd=outside, env=CLEAN_ENV)
        assert re.fullmatch(r"cassieq \d+\.\d+\.\d+\S*\n", version.stdout), version.stdout
        _run(cassieq, *flags, "bootstrap", "--create-keyspace", cwd=outside, env=CLEAN_ENV)
        _run(cassieq, *flags, "create-queue", "pkgq", cwd=outside, env=CLEAN_ENV)
        _run(cassieq, *flags, "put", "pkgq", "from the cli", cwd=outside, env=CLEAN_ENV)
        client = (
            "import json, sys\n"
            "from cassieq_spark import QueueClient, ConnectionConfig\n"
            "hosts, port, ks = sys.argv[1].split(','), int(sys.argv[2]), sys.argv[3]\n"
            "with QueueClient(ConnectionConfig(contact_points=tuple(hosts), port=port, keyspace=ks)) as c:\n"
            "    c.put('pkgq', b'from the client')\n"
            "    got = [c.get('pkgq'), c.get('pkgq')]\n"
            "    for m in got:\n"
            "        c.ack('pkgq', m.pop_receipt)\n"
            "    print(json.dumps(sorted(m.payload.decode() for m in got)))\n"
        )
        done = _run(
            python, "-c", client, ",".join(cassandra.contact_points), str(cassandra.port),
            keyspace, cwd=outside, env=CLEAN_ENV,
        )  # fmt: skip
        assert json.loads(done.stdout) == ["from the cli", "from the client"]

        # Each feature behind an extra names the install that adds it, in one line.
        watch = _run(
            cassieq, *flags, "stats", "pkgq", "--watch", "--count", "1",
            cwd=outside, env=CLEAN_ENV, ok=False,
        )  # fmt: skip
        assert watch.returncode != 0
        assert "pip install 'cassieq-spark[cli]'" in watch.stderr, watch.stderr
        assert "Traceback" not in watch.stderr, watch.stderr
        spark = _run(
            python, "-c", "import cassieq_spark; cassieq_spark.register",
            cwd=outside, env=CLEAN_ENV, ok=False,
        )  # fmt: skip
        assert "MissingExtraError" in spark.stderr, spark.stderr
        assert "pip install 'cassieq-spark[spark]'" in spark.stderr, spark.stderr
    finally:
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {keyspace}")


def test_the_wheel_with_its_dependencies_finds_the_connector_and_the_repair_job(
    dist, tmp_path: Path
) -> None:
    _, wheel, _ = dist
    # A fresh venv that holds only the wheel; the dependencies (pyspark is 400 MB) are read from
    # this interpreter's site-packages through a .pth path line, which adds the directory but
    # runs none of its .pth files, so the checkout's editable install stays out of sight.
    env_dir = tmp_path / "venv"
    python = _venv(env_dir)
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        wheel,
        env=CLEAN_ENV,
    )
    site = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    )
    (site / "zz_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = _run(
        python,
        "-c",
        "import cassieq_spark; print(cassieq_spark.__file__)",
        cwd=outside,
        env=CLEAN_ENV,
    )
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout
    helped = _run(env_dir / "bin" / "cassieq", "--help", cwd=outside, env=CLEAN_ENV)
    assert "usage: cassieq" in helped.stdout
    assert os.access(env_dir / "bin" / "cassieq", os.X_OK)
    repair = _run(env_dir / "bin" / "cassieq-repair", "--help", cwd=outside, env=CLEAN_ENV)
    assert "usage: cassieq-repair" in repair.stdout and "--all-queues" in repair.stdout
    as_module = _run(
        python, "-m", "cassieq_spark.spark.repair_command", "--help", cwd=outside, env=CLEAN_ENV
    )
    assert "--all-queues" in as_module.stdout
    # The lookup package that lets Spark find format("cassieq") without register() ships too.
    found = _run(
        python,
        "-c",
        "import pkgutil, pyspark_cassieq; "
        "print(pyspark_cassieq.DefaultSource.name(), "
        "[m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')])",
        cwd=outside,
        env=CLEAN_ENV,
    )
    assert found.stdout.split()[0] == "cassieq", found.stdout
    assert "'pyspark_cassieq'" in found.stdout, found.stdout
