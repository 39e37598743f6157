"""The offset clock's pure parts: which JVM properties and classpath start a node on it, where
its class is compiled to (a changed source compiles anew), the javac command, and the errors
for a bad offset or a missing javac. Starting a node on it: tests/long/test_node_clock_offset_long.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cassieq_dev.local_cassandra import (
    OFFSET_CLOCK_CLASS,
    OFFSET_PROPERTY,
    CassandraError,
    compile_offset_clock,
    offset_clock,
    offset_clock_extras,
)
from cassieq_dev.local_cassandra.clock import (
    CLOCK_PROPERTY,
    JDK_PACKAGE,
    MAX_OFFSET_MS,
    OFFSET_CLOCK_SOURCE,
    class_file,
    classes_dir,
    find_javac,
    javac_command,
)


def test_the_source_declares_the_class_and_property_the_launcher_names() -> None:
    text = OFFSET_CLOCK_SOURCE.read_text()
    package, name = OFFSET_CLOCK_CLASS.rsplit(".", 1)
    assert f"package {package};" in text
    assert f"public final class {name} implements Clock" in text
    assert f'"{OFFSET_PROPERTY}"' in text
    assert OFFSET_CLOCK_SOURCE.stem == name


@pytest.mark.parametrize("offset_ms", [2000, -2000, 0, MAX_OFFSET_MS])
def test_extras_name_the_clock_class_its_offset_and_its_classes(
    tmp_path: Path, offset_ms: int
) -> None:
    extras = offset_clock_extras(offset_ms, tmp_path / "classes")
    assert extras.props == {CLOCK_PROPERTY: OFFSET_CLOCK_CLASS, OFFSET_PROPERTY: str(offset_ms)}
    assert extras.classpath == (tmp_path / "classes",)


def test_a_compiled_class_is_reused_without_javac(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "cassandra-all-5.0.9.jar").write_bytes(b"")
    compiled = class_file(classes_dir(tmp_path, OFFSET_CLOCK_SOURCE.read_text()))
    compiled.parent.mkdir(parents=True)
    compiled.write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac to be found
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert compile_offset_clock(tmp_path, lib) == classes_dir(
        tmp_path, OFFSET_CLOCK_SOURCE.read_text()
    )
    extras = offset_clock(tmp_path, -500, lib)
    assert extras.props[OFFSET_PROPERTY] == "-500"


@pytest.mark.parametrize("bad", [1.5, "2000", True, None, MAX_OFFSET_MS + 1, -MAX_OFFSET_MS - 1])
def test_an_offset_that_is_not_whole_milliseconds_within_a_day_is_refused(
    tmp_path: Path, bad: object
) -> None:
    with pytest.raises(ValueError, match="clock offset must be"):
        offset_clock_extras(bad, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clock offset must be"):
        offset_clock(tmp_path, bad)  # type: ignore[arg-type]  # refused before compiling


def test_the_classes_dir_follows_the_source_so_an_edit_compiles_anew(tmp_path: Path) -> None:
    one = classes_dir(tmp_path, "class A {}")
    assert one == classes_dir(tmp_path, "class A {}")
    assert one != classes_dir(tmp_path, "class A { }")
    assert one.parent == tmp_path / "clock"
    assert class_file(one) == one / "cassieq" / "dev" / "OffsetClock.class"


def test_javac_compiles_for_java_11_against_the_cassandra_jars(tmp_path: Path) -> None:
    cmd = javac_command("javac", OFFSET_CLOCK_SOURCE, tmp_path / "out", tmp_path / "lib")
    assert cmd[0] == "javac" and cmd[-1] == str(OFFSET_CLOCK_SOURCE)
    assert cmd[cmd.index("--release") + 1] == "11"
    assert cmd[cmd.index("-cp") + 1] == f"{tmp_path / 'lib'}/*"
    assert cmd[cmd.index("-d") + 1] == str(tmp_path / "out")


def test_a_missing_javac_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(CassandraError, match=f"no javac found.*apt-get install -y {JDK_PACKAGE}"):
        find_javac()


def test_javac_from_java_home_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    javac = tmp_path / "bin" / "javac"
    javac.parent.mkdir()
    javac.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert find_javac() == str(javac)
