"""The bounds tables of docs/client.md ("Limits") and docs/spark.md (bounds of the connector's
options) against the code: every row names a test that exists, each figure a row states is the
code's constant, and each limit this file holds is accepted at its bound and refused, in one
line, just past it. A limit added to the code without a row (or a row without a test) fails
here or in the row's own test."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cassieq_spark import validate
from cassieq_spark.config import ConnectionConfig
from cassieq_spark.engine.consume.batch_ack import receipts_list
from cassieq_spark.engine.core import monoton, queues
from cassieq_spark.engine.core.buckets import MAX_BUCKET_SIZE, validate_bucket_size
from cassieq_spark.errors import ConfigError
from cassieq_spark.spark import option_table
from cassieq_spark.spark import options as spark_options

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests/unit/test_documented_bounds.py"


def _table_rows(page: str) -> list[tuple[str, str, str]]:
    """(first cell, second cell, test cell) of every table of ``page`` whose last column is
    'test'."""
    out, in_table = [], False
    for line in (ROOT / page).read_text().splitlines():
        cells = (
            [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        )
        if not cells:
            in_table = False
        elif cells[-1] == "test":
            in_table = True
        elif in_table and not set(cells[0]) <= {"-"}:
            out.append((cells[0], cells[1] if len(cells) > 2 else "", cells[-1]))
    return out


ROWS = {page: _table_rows(page) for page in ("docs/client.md", "docs/spark.md")}


def _label(text: str) -> str:
    return text.replace("`", "")


def _settings(**over: object) -> dict:
    base: dict = {
        "name": "q",
        "bucket_size": 1000,
        "max_delivery_count": 5,
        "visibility_timeout": 30.0,
        "repair_timeout": 15.0,
        "dead_letter_queue": None,
        "message_ttl": None,
        "max_payload_bytes": 1024,
    }
    return queues.validate_settings(**{**base, **over})


def _source(**over: str) -> object:
    return spark_options.parse_source_settings({"contactPoints": "127.0.0.1", "queue": "q", **over})


def _sink(**over: str) -> object:
    return spark_options.sink_options({"contactPoints": "127.0.0.1", "queue": "q", **over}, False)


Check = Callable[[], object]
MAX = validate.MAX_BIGINT

# label (the row's first cell, without backticks) -> (accepted at the bound, refused past it,
# figures the row's "allowed" cell must show, formatted from the code's constants)
BOUNDS: dict[str, tuple[list[Check], list[Check], list[str]]] = {
    "queue name": (
        [lambda: validate.queue_name("a" * 200)],
        [lambda: validate.queue_name("a" * 201), lambda: validate.queue_name(["q"])],
        ["1-200"],
    ),
    "keyspace": (
        [lambda: validate.keyspace_name("k" * 48)],
        [lambda: validate.keyspace_name("k" * 49), lambda: validate.keyspace_name("1k")],
        ["1-48"],
    ),
    "app role (--app-role, app_role=)": (
        [lambda: validate.role_name("r" * 48)],
        [lambda: validate.role_name("r" * 49), lambda: validate.role_name("rôle")],
        ["1-48"],
    ),
    "delay": (
        [lambda: validate.delay_seconds(validate.MAX_DELAY_SECONDS)],
        [lambda: validate.delay_seconds(validate.MAX_DELAY_SECONDS + 0.001)],
        [f"{validate.MAX_DELAY_SECONDS:,.0f} s"],
    ),
    "visibility timeout": (
        [
            lambda: validate.visibility_seconds(validate.MAX_VISIBILITY_SECONDS),
            lambda: validate.visibility_seconds(validate.MIN_VISIBILITY_SECONDS),
        ],
        [
            lambda: validate.visibility_seconds(validate.MAX_VISIBILITY_SECONDS + 0.001),
            lambda: validate.visibility_seconds(validate.MIN_VISIBILITY_SECONDS - 0.001),
            lambda: validate.visibility_seconds(0),
        ],
        [
            f"{validate.MIN_VISIBILITY_SECONDS:g} to {validate.MAX_VISIBILITY_SECONDS:,.0f} s",
        ],
    ),
    "repair timeout": (
        [lambda: validate.repair_timeout_seconds(validate.MAX_REPAIR_TIMEOUT_SECONDS)],
        [lambda: validate.repair_timeout_seconds(validate.MAX_REPAIR_TIMEOUT_SECONDS + 1)],
        [f"{validate.MAX_REPAIR_TIMEOUT_SECONDS:,.0f} s"],
    ),
    "message TTL": (
        [lambda: _settings(message_ttl=validate.MAX_MESSAGE_TTL_SECONDS)],
        [lambda: _settings(message_ttl=validate.MAX_MESSAGE_TTL_SECONDS + 1)],
        [f"1 to {validate.MAX_MESSAGE_TTL_SECONDS:,}"],
    ),
    "max delivery count": (
        [lambda: _settings(max_delivery_count=validate.MAX_DELIVERY_COUNT)],
        [lambda: _settings(max_delivery_count=validate.MAX_DELIVERY_COUNT + 1)],
        [f"1 to {validate.MAX_DELIVERY_COUNT:,}"],
    ),
    "bucket size": (
        [lambda: validate_bucket_size(MAX_BUCKET_SIZE)],
        [lambda: validate_bucket_size(MAX_BUCKET_SIZE + 1), lambda: validate_bucket_size(0)],
        [f"1 to {MAX_BUCKET_SIZE:,}"],
    ),
    "batches": (
        [
            lambda: validate.max_messages(validate.MAX_BATCH),
            lambda: validate.wait_seconds(validate.MAX_WAIT_SECONDS),
            lambda: receipts_list(["r"] * validate.MAX_BATCH, "pop_receipts", "receipts"),
        ],
        [
            lambda: validate.max_messages(validate.MAX_BATCH + 1),
            lambda: validate.wait_seconds(validate.MAX_WAIT_SECONDS + 0.001),
            lambda: receipts_list(["r"] * (validate.MAX_BATCH + 1), "pop_receipts", "receipts"),
        ],
        [f"1 to {validate.MAX_BATCH:,}", f"0 to {validate.MAX_WAIT_SECONDS:g} s"],
    ),
    "payload": (
        [lambda: _settings(max_payload_bytes=queues.MAX_PAYLOAD_LIMIT)],
        [lambda: _settings(max_payload_bytes=queues.MAX_PAYLOAD_LIMIT + 1)],
        [f"at most {queues.MAX_PAYLOAD_LIMIT // 2**20} MiB"],
    ),
    "headers": (
        [
            lambda: validate.headers({str(i): "" for i in range(validate.MAX_HEADERS_COUNT)}),
            lambda: validate.headers({"k": "v" * (validate.MAX_HEADERS_BYTES - 1)}),
        ],
        [
            lambda: validate.headers({str(i): "" for i in range(validate.MAX_HEADERS_COUNT + 1)}),
            lambda: validate.headers({"k": "v" * validate.MAX_HEADERS_BYTES}),
        ],
        [f"{validate.MAX_HEADERS_COUNT:,} entries", f"{validate.MAX_HEADERS_BYTES // 1024} KiB"],
    ),
    "text": (
        [lambda: validate.text("ok é", "payload")],
        [lambda: validate.text("\ud800", "payload")],
        ["lone surrogates"],
    ),
    "consistency": (
        [lambda: ConnectionConfig(consistency="QUORUM")],
        [lambda: ConnectionConfig(consistency="ONE")],
        ["LOCAL_QUORUM", "EACH_QUORUM"],
    ),
    "replication factor": (
        [lambda: validate.replication_factor(validate.MAX_REPLICATION_FACTOR)],
        [lambda: validate.replication_factor(validate.MAX_REPLICATION_FACTOR + 1)],
        [f"1 to {validate.MAX_REPLICATION_FACTOR}"],
    ),
    "port": (
        [lambda: validate.port(validate.MAX_PORT), lambda: validate.port("1")],
        [lambda: validate.port(validate.MAX_PORT + 1), lambda: validate.port(0)],
        [f"1 to {validate.MAX_PORT:,}"],
    ),
    "connectTimeout, requestTimeout": (
        [lambda: ConnectionConfig(connect_timeout=3600.0, request_timeout=3600.0)],
        [
            lambda: ConnectionConfig(connect_timeout=3600.001),
            lambda: ConnectionConfig(request_timeout=0),
        ],
        ["3,600 s"],
    ),
    "stats --watch": (
        [
            lambda: validate.watch_interval(validate.MIN_WATCH_INTERVAL_SECONDS),
            lambda: validate.watch_interval(validate.MAX_WATCH_INTERVAL_SECONDS),
            lambda: validate.watch_count("1"),
        ],
        [
            lambda: validate.watch_interval(validate.MIN_WATCH_INTERVAL_SECONDS / 2),
            lambda: validate.watch_interval(validate.MAX_WATCH_INTERVAL_SECONDS + 1),
            lambda: validate.watch_count("0"),
        ],
        [
            f"{validate.MIN_WATCH_INTERVAL_SECONDS:g} to {validate.MAX_WATCH_INTERVAL_SECONDS:,.0f} s"
        ],
    ),
    "option names": (
        [lambda: _source(maxMessagesPerTrigger="5")],
        [lambda: _source(maxMessagesPerTriger="5"), lambda: _sink(consistensy="ALL")],
        ["closest allowed spelling"],
    ),
    "writeId": (
        [lambda: _sink(writeId="w" * option_table.WRITE_ID_MAX)],
        [
            lambda: _sink(writeId="w" * (option_table.WRITE_ID_MAX + 1)),
            lambda: _sink(writeId="a\nb"),
        ],
        [f"1 to {option_table.WRITE_ID_MAX} printable"],
    ),
    "idBlockSize": (
        [lambda: _sink(idBlockSize=str(monoton.MAX_BLOCK))],
        [lambda: _sink(idBlockSize=str(monoton.MAX_BLOCK + 1)), lambda: _sink(idBlockSize="0")],
        [f"1 to {monoton.MAX_BLOCK:,}"],
    ),
    "integer options (maxIdsPerPartition, minIdsPerPartition, maxMessagesPerTrigger, minMessagesPerTrigger, maxBatchAttempts)": (
        [
            lambda: _source(maxIdsPerPartition=str(MAX)),
            lambda: _source(maxMessagesPerTrigger=str(MAX), minMessagesPerTrigger="1"),
            lambda: _source(maxBatchAttempts=str(option_table.MIN_BATCH_ATTEMPTS)),
        ],
        [
            lambda: _source(maxIdsPerPartition=str(MAX + 1)),
            lambda: _source(minIdsPerPartition="0"),
            lambda: _source(maxMessagesPerTrigger=str(MAX + 1)),
            lambda: _source(maxBatchAttempts=str(option_table.MIN_BATCH_ATTEMPTS - 1)),
        ],
        [f"{MAX:,}", f"maxBatchAttempts`: {option_table.MIN_BATCH_ATTEMPTS}"],
    ),
    "queue settings (bucketSize, maxDeliveryCount, visibilityTimeout, repairTimeout, messageTtl, maxPayloadBytes)": (
        [lambda: _source(createQueue="true", maxDeliveryCount=str(validate.MAX_DELIVERY_COUNT))],
        [
            lambda: _source(
                createQueue="true", maxDeliveryCount=str(validate.MAX_DELIVERY_COUNT + 1)
            ),
            lambda: _source(createQueue="true", bucketSize=str(MAX_BUCKET_SIZE + 1)),
            lambda: _source(createQueue="true", visibilityTimeout="43201"),
            lambda: _source(createQueue="true", maxPayloadBytes=str(queues.MAX_PAYLOAD_LIMIT + 1)),
        ],
        ["client's limits"],
    ),
}


def _rows_naming(path: str) -> dict[str, str]:
    return {
        _label(label): allowed
        for rows in ROWS.values()
        for label, allowed, test in rows
        if path in test
    }


def test_every_row_names_a_test_that_exists() -> None:
    assert ROWS["docs/client.md"] and ROWS["docs/spark.md"]
    for page, rows in ROWS.items():
        for label, _allowed, test in rows:
            refs = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", test)
            assert refs, f"{page}: row {label!r} names no test file: {test!r}"
            sources = []
            for path, func in refs:
                assert (ROOT / path).is_file(), f"{page}: row {label!r}: {path} does not exist"
                source = (ROOT / path).read_text()
                sources.append(source)
                if func:
                    assert f"def {func}(" in source, f"{page}: row {label!r}: no {path}::{func}"
            for name in re.findall(r"`(test_\w+)\*?`", test):
                assert any(f"def {name}" in s for s in sources), f"{page}: {label!r}: {name}"


def test_the_rows_this_file_holds_are_the_ones_it_checks() -> None:
    assert set(_rows_naming(HERE)) == set(BOUNDS)


@pytest.mark.parametrize("label", sorted(BOUNDS), ids=lambda label: label.split(" (")[0])
def test_each_bound_holds_and_its_row_shows_it(label: str) -> None:
    accepted, refused, figures = BOUNDS[label]
    allowed = _rows_naming(HERE)[label]
    for figure in figures:
        assert figure in allowed, f"row {label!r} does not show {figure!r}: {allowed!r}"
    for check in accepted:
        check()
    for check in refused:
        with pytest.raises(ConfigError) as info:
            check()
        assert "\n" not in str(info.value), str(info.value)
