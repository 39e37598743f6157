"""`make dist` output installs and runs outside the checkout (built as `make dist` builds it)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(
    *cmd: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_wheel_and_sdist_build_without_warnings_and_the_wheel_installs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    output = built.stdout + built.stderr
    assert "Deprecat" not in output and "BuildBackendWarning" not in output, output[-3000:]
    (sdist,) = dist.glob("cassieq_spark-*.tar.gz")
    (wheel,) = dist.glob("cassieq_spark-*-py3-none-any.whl")
    assert sdist.stat().st_size > 0

    # A fresh venv that holds only the wheel; the dependencies (pyspark is 400 MB) are read from
    # this interpreter's site-packages through a .pth path line, which adds the directory but
    # runs none of its .pth files, so the checkout's editable install stays out of sight.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", wheel, env=clean)
    site = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    )
    (site / "zz_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = _run(
        python, "-c", "import cassieq_spark; print(cassieq_spark.__file__)", cwd=outside, env=clean
    )
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout
    helped = _run(env_dir / "bin" / "cassieq", "--help", cwd=outside, env=clean)
    assert "usage: cassieq" in helped.stdout
    assert os.access(env_dir / "bin" / "cassieq", os.X_OK)
    # The lookup package that lets Spark find format("cassieq") without register() ships too.
    found = _run(
        python,
        "-c",
        "import pkgutil, pyspark_cassieq; "
        "print(pyspark_cassieq.DefaultSource.name(), "
        "[m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')])",
        cwd=outside,
        env=clean,
    )
    assert found.stdout.split()[0] == "cassieq", found.stdout
    assert "'pyspark_cassieq'" in found.stdout, found.stdout
