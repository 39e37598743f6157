"""Inputs that used to hang, grow memory without bound or run for ever get a bound and a
one-line ConfigError: password files (a FIFO, /dev/zero, a huge first line), durations of the
source (leaseTimeout, maxTriggerDelay) and the queuePattern matcher.

Whatever could hang or eat memory runs in a child process with a memory cap and a timeout, so
a regression fails the test instead of stopping the run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.options import parse_source_settings

pytestmark = pytest.mark.unit

CHILD_TIMEOUT = 20.0


def _in_child(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child with 1 GiB of address space; it prints its result."""
    prelude = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    try:
        return subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {CHILD_TIMEOUT:.0f} s (a hang or an unbounded read)")


def _read_password(path: str, option: str | None = None) -> str:
    args = repr(path) + ("" if option is None else f", {option!r}")
    done = _in_child(
        f"""
        from cassieq_spark.config import read_password_file
        from cassieq_spark.errors import ConfigError
        try:
            print("ok", repr(read_password_file({args})))
        except ConfigError as exc:
            print("ConfigError", exc)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("row", ["N165", "N220"])
def test_password_file_that_is_a_fifo_is_refused_at_once(tmp_path: Path, row: str) -> None:
    """A FIFO nobody writes (as --app-password-file, N165, or CASSIEQ_PASSWORD_FILE, N220: one
    reader for both) is refused, not waited on."""
    fifo = tmp_path / "pw_fifo"
    os.mkfifo(fifo)
    out = _read_password(str(fifo))
    assert out.startswith("ConfigError") and "is not a regular file" in out, out


def test_password_file_that_never_ends_is_refused_without_reading_it_all() -> None:
    """N177: /dev/zero as the password file."""
    out = _read_password("/dev/zero")
    assert out.startswith("ConfigError") and "not a regular file" in out, out


def test_password_file_with_a_huge_first_line_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "pw_big"
    big.write_bytes(b"x" * 100_000)
    out = _read_password(str(big))
    assert out.startswith("ConfigError") and "longer than 4096 bytes" in out, out


def test_password_file_drops_a_byte_order_mark(tmp_path: Path) -> None:
    """N171: a file as Notepad writes it (UTF-8 BOM) holds the password without the BOM."""
    bom = tmp_path / "pw_bom"
    bom.write_bytes(b"\xef\xbb\xbfapppw\r\nsecond line\n")
    assert _read_password(str(bom)) == "ok 'apppw'"


@pytest.mark.parametrize(
    "row, content",
    [("N160", None), ("N161", b""), ("N163", b"\xff\xfe\x00"), ("N164", b"\nsecret\n")],
)
def test_app_password_file_errors_name_the_flag(tmp_path: Path, row: str, content) -> None:
    """N160-N164: errors about --app-password-file name that flag, not 'passwordFile'."""
    path = tmp_path / "pw"
    if content is not None:
        path.write_bytes(content)
    out = _read_password(str(path), "--app-password-file")
    assert out.startswith("ConfigError option '--app-password-file'"), out


@pytest.mark.parametrize(
    "row, options, message",
    [
        ("N302", {"leaseTimeout": "1e9"}, "'leaseTimeout' must be at most 600"),
        ("N301", {"leaseTimeout": "1e12"}, "'leaseTimeout' must be at most 600"),
        (
            "N288",
            {"maxTriggerDelay": "99999999999h", "minMessagesPerTrigger": "5"},
            "at most 86400",
        ),
    ],
)
def test_source_durations_have_an_upper_bound(row: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_source_settings({"queue": "q", **options})


def test_source_durations_at_their_bounds_are_taken() -> None:
    settings = parse_source_settings(
        {
            "queue": "q",
            "leaseTimeout": "600",
            "maxTriggerDelay": "24h",
            "minMessagesPerTrigger": "5",
        }
    )
    assert settings.lease_timeout == 600.0 and settings.max_trigger_delay == 86400.0


def test_queue_pattern_matches_in_linear_time() -> None:
    """N312: '(a+)+' against a 41-character name took minutes (time doubling per character)
    with a backtracking matcher; RE2 answers at once."""
    done = _in_child(
        """
        from cassieq_spark.spark.options import parse_source_settings
        selection = parse_source_settings({"queue": "", "queuePattern": "(a+)+"}).selection
        print(selection.matches("a" * 39 + "-x"), selection.matches("aaa"))
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize(
    "row, pattern, message",
    [
        ("N312", "(?=orders)orders_.*", "RE2 syntax"),
        ("N312", r"(a)\1", "RE2 syntax"),
        ("N276", "x{99999999999}", "RE2 syntax"),
    ],
)
def test_queue_patterns_outside_re2_are_refused(row: str, pattern: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_source_settings({"queuePattern": pattern})


def test_queue_pattern_posix_classes_match() -> None:
    """N277: '[[:alpha:]]+' compiled in Python re (with a FutureWarning) and matched nothing."""
    selection = parse_source_settings({"queuePattern": "[[:alpha:]]+"}).selection
    assert selection.matches("orders") and not selection.matches("orders_1")
