"""``put --ndjson`` checks every line, as ``put_batch`` would, before anything is put, and
names the stdin line; ``update-queue`` refuses a setting fixed at creation by name. No
Cassandra: the checks run before any put or connection."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from cassieq_spark import cli
from cassieq_spark.engine.core.queues import QueueInfo
from cassieq_spark.errors import ConfigError, PayloadTooLargeError

QUEUE = QueueInfo(name="nd", queue_id=uuid.uuid4(), max_payload_bytes=10)


def _lines(*objects: object, good: int = 1000) -> io.BytesIO:
    rows = [json.dumps({"payload": "ok"}) for _ in range(good)]
    rows += [o if isinstance(o, str) else json.dumps(o) for o in objects]
    return io.BytesIO(("\n".join(rows) + "\n").encode())


def test_a_payload_over_the_queue_limit_past_the_first_thousand_lines_is_refused_by_line():
    with pytest.raises(PayloadTooLargeError, match=r"^stdin line 1001: payload has 50 bytes; "):
        cli.read_ndjson(_lines({"payload": "x" * 50}), QUEUE)


def test_a_group_that_its_header_contradicts_is_refused_before_any_put():
    line = {"payload": "a", "group": "g", "headers": {"cassieq-group": "h"}}
    with pytest.raises(ConfigError, match=r"^stdin line 1001: group is 'g' but header"):
        cli.read_ndjson(_lines(line), QUEUE)


def test_a_grouped_delayed_line_is_refused_with_its_line_number():
    with pytest.raises(ConfigError, match=r"^stdin line 3: a grouped message cannot be delayed"):
        cli.read_ndjson(_lines({"payload": "a", "group": "g", "delay": 5}, good=2))


def test_a_key_given_twice_on_a_line_is_refused():
    with pytest.raises(
        ConfigError, match=r"^stdin line 1: not JSON \(key 'payload' is given twice"
    ):
        cli.read_ndjson(_lines('{"payload": "a", "payload": "b"}', good=0))


def test_a_line_nested_too_deeply_is_refused_with_its_line_number():
    with pytest.raises(ConfigError, match=r"^stdin line 2: not JSON \(arrays or objects nested"):
        cli.read_ndjson(_lines("[" * 100_000, good=1))


def test_a_line_that_is_not_utf8_is_refused_as_such():
    stream = io.BytesIO(b'{"payload": "a"}\n\xff\xfe\n')
    with pytest.raises(ConfigError, match=r"^stdin line 2: not UTF-8 text"):
        cli.read_ndjson(stream)


def test_lines_within_the_checks_are_read_with_a_byte_order_mark_skipped():
    stream = io.BytesIO(b'\xef\xbb\xbf{"payload": "bom"}\n{"payload": "x", "group": "g"}\n')
    entries = cli.read_ndjson(stream, QUEUE)
    assert [(e.payload, e.group) for e in entries] == [(b"bom", None), (b"x", "g")]


@pytest.mark.parametrize("flag", ["--bucket-size", "--repair-timeout"])
def test_update_queue_names_a_setting_fixed_at_creation(flag, capsys):
    assert cli.main(["update-queue", "q", flag, "5"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"update-queue cannot change {flag}: it is fixed when the queue is created" in err
    assert "--visibility-timeout, --max-delivery-count" in err
