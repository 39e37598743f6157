"""Numbers are read from ASCII digits only, and JSON settings without surprises: '²' passes
``str.isdigit`` but not ``int``, which used to end in a raw ValueError (exit 1) instead of a
one-line error (exit 2) naming the value."""

from __future__ import annotations

import pytest

from cassieq_spark import cli
from cassieq_spark.errors import ConfigError
from cassieq_spark.validate import port, replication, watch_count

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "row, argv, fragment",
    [
        ("N55", ["get", "cg", "--max=--5"], "--max"),
        ("N56", ["get", "cg", "--max", "²"], "--max"),
        ("N119", ["stats", "wq", "--watch", "--interval", "0.1", "--count", "²"], "--count"),
        ("N205", ["--contact-points", "127.0.0.1:²", "list-queues"], "contactPoints"),
    ],
)
def test_unicode_digits_are_a_one_line_error_before_connecting(
    row: str, argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err, err


@pytest.mark.parametrize(
    "row, value",
    [
        ("N138", '{"class": "SimpleStrategy", "replication_factor": "²"}'),
        ("N153", "[" * 5000 + "]" * 5000),
        (
            "N154",
            '{"class": "NetworkTopologyStrategy", "class": "SimpleStrategy", "replication_factor": 1}',
        ),
    ],
)
def test_replication_text_is_refused_in_one_line(row: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        replication(value)
    assert "replication" in str(info.value) and "\n" not in str(info.value)


def test_integer_text_takes_ascii_digits_only() -> None:
    from cassieq_spark.validate import integer_text

    assert integer_text(" 12 ") == 12 and integer_text("-3") == -3
    assert integer_text("²") is None and integer_text("--5") is None and integer_text("1_0") is None
    assert integer_text("١٢") is None  # Arabic-Indic digits
    with pytest.raises(ConfigError):
        watch_count("²")
    with pytest.raises(ConfigError):
        port("²")
