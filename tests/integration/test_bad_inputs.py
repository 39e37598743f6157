"""Every bad input of the sweep in ``shared/reviews/bad-inputs.md`` (CLI, Python client, repair
job; the Spark rows are in ``test_bad_inputs_spark.py``), one case per row, id = the row's id.

Each case is in one of two classes:

- ``clear error``: the product's own error type, one line, naming the bad value or option and
  what is allowed; the CLI and the repair job exit with the documented status (2 for a bad
  argument or value) and print no traceback;
- ``correct behaviour``: the input is legitimate and does what it should.

Cases whose id ends in ``x`` are not in the table: a second sweep of other numbers, names and
option typos, tried as a new user would.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import math
import os
import re
import sys
import uuid
from pathlib import Path

import pytest
from cassandra.query import BatchStatement

from cassieq_spark import QueueClient, cli
from cassieq_spark.engine.core.messages import BATCH_MAX_BYTES, Pipeline, map_bytes, write_messages
from cassieq_spark.engine.core.receipts import PopReceipt
from cassieq_spark.errors import (
    CassieQError,
    ConfigError,
    PayloadTooLargeError,
    QueueExistsError,
    QueueNotFoundError,
)
from cassieq_spark.validate import MAX_HEADERS_BYTES

pytestmark = pytest.mark.integration

P = f"bi{uuid.uuid4().hex[:6]}_"  # this module's queues
KS = "cassieq_test"
NOT_A_RECEIPT = "is not a pop receipt"
OTHER_QUEUE = "is not a receipt of queue"


@pytest.fixture(scope="module")
def world(queue_client: QueueClient) -> dict:
    """Queues q1, q2 (q2 with a message delivered and acked once), pyq, pyq2 and receipts."""
    q = queue_client
    for name in ("q1", "q2", "pyq", "pyq2", "deltwice", "dlq"):
        q.create_queue(P + name, exist_ok=True)
    q.delete_queue(P + "deltwice")
    q.put(P + "q1", b"m1")
    q.put_many(P + "q2", [b"m1", b"m2", b"m3"])
    q.put(P + "pyq2", b"p")
    other = q.get(P + "q1")
    acked = q.get(P + "q2")
    assert q.ack(P + "q2", acked.pop_receipt)
    held = q.get(P + "q2", visibility_timeout=600)
    info2 = q.get_queue(P + "q2")
    return {
        "other_queue_receipt": other.pop_receipt,
        "acked_receipt": acked.pop_receipt,
        "held_receipt": held.pop_receipt,
        "forged_overflow": PopReceipt.issue(info2, 2**64 - 1, 1),
        "forged_far": PopReceipt.issue(info2, 2**62, 1),
        "random_r1": "r2" + base64.urlsafe_b64encode(os.urandom(40)).decode().rstrip("="),
        # Not starting with "-" (1 in 64 would): the command line would take it for an option.
        "random_b64": "A" + base64.urlsafe_b64encode(os.urandom(40)).decode().rstrip("="),
    }


# -- the command line --------------------------------------------------------------------------

# (id, argv after the connection flags, exit status, pattern of the last stderr line)
# {p}: this module's queue prefix; {name}: a receipt from ``world``.
# fmt: off
CLI = [
    ("C02", "bootstrap --create-keyspace --replication-factor 3", 2, r"exists with replication .*'replication_factor': 1.*ALTER KEYSPACE " + KS),
    ("C03", "bootstrap --create-keyspace --replication-factor 0", 2, r"replication factor must be an integer from 1 to 10, got 0"),
    ("C04", "bootstrap --replication-factor x", 2, r"argument --replication-factor: expected a whole number written with ASCII digits, got 'x'"),
    ("C05", "", 2, r"the following arguments are required: COMMAND"),
    ("C06", "put {p}q1", 2, r"put needs MESSAGE \(or - to read it from stdin\), or --ndjson"),
    ("C07", "put {p}q1 hello extra", 2, r"unrecognized arguments: extra"),
    ("C08", "truncate {p}q1", 2, r"invalid choice: 'truncate'"),
    ("C08b", "purge {p}nosuchqueue", 4, r"queue '{p}nosuchqueue' does not exist"),
    ("C09", "put {p}nosuchqueue hello", 4, r"queue '{p}nosuchqueue' does not exist; create it first"),
    ("C10", "get {p}nosuchqueue", 4, r"queue '{p}nosuchqueue' does not exist"),
    ("C11", "stats {p}nosuchqueue", 4, r"queue '{p}nosuchqueue' does not exist"),
    ("C12", "put {p}q1 hello --delay -5", 2, r"delay must be a finite number of seconds >= 0, got -5"),
    ("C13", "put {p}q1 hello --delay nan", 2, r"delay must be a finite number of seconds >= 0, got nan"),
    ("C14", "put {p}q1 hello --delay inf", 2, r"delay must be a finite number of seconds >= 0, got inf"),
    ("C15", "put {p}q1 hello --delay soon", 2, r"argument --delay: expected a number written with ASCII digits \(no '_'\), got 'soon'"),
    ("C16", "put {p}q1 hello --delay 1e300", 2, r"delay must be at most 43200 seconds \(12 hours\), got 1e\+300"),
    ("C17", "put {p}q1 hello --delay 1e11", 2, r"delay must be at most 43200 seconds"),
    ("C18", "create-queue {p}qb0 --bucket-size 0", 2, r"bucket size must be an integer from 1 to 100000, got 0"),
    ("C19", "create-queue {p}qb0 --bucket-size -10", 2, r"bucket size must be an integer from 1 to 100000, got -10"),
    ("C20", "create-queue {p}qb0 --bucket-size 99999999999999999999", 2, r"bucket size must be .* got 99999999999999999999"),
    ("C21", "create-queue {p}qb0 --bucket-size nan", 2, r"argument --bucket-size: expected a whole number written with ASCII digits, got 'nan'"),
    ("C22", "create-queue {p}qb0 --max-delivery-count 0", 2, r"max delivery count must be an integer from 1 to 1000, got 0"),
    ("C23", "create-queue {p}qb0 --max-delivery-count 99999999999", 2, r"max delivery count must be an integer from 1 to 1000, got 99999999999"),
    ("C24", "create-queue {p}qb0 --max-delivery-count 2.5", 2, r"argument --max-delivery-count: expected a whole number written with ASCII digits, got '2.5'"),
    ("C25", "create-queue {p}qb0 --visibility-timeout 0", 2, r"visibility timeout must be > 0 seconds"),
    ("C26", "create-queue {p}qb0 --visibility-timeout -1", 2, r"visibility timeout must be a finite number of seconds >= 0, got -1"),
    ("C27", "create-queue {p}qb0 --visibility-timeout nan", 2, r"visibility timeout must be a finite number .* got nan"),
    ("C28", "create-queue {p}qvth --visibility-timeout 1e300", 2, r"visibility timeout must be at most 43200 seconds"),
    ("C29", "create-queue {p}qrt0 --repair-timeout 0", 2, r"repair timeout must be > 0 seconds, got 0"),
    ("C30", "create-queue {p}qttl --message-ttl 999999999", 2, r"message TTL must be a whole number of seconds from 1 to 630720000"),
    ("C31", "create-queue {p}qb0 --message-ttl 0", 2, r"message TTL must be a whole number of seconds from 1"),
    ("C32", "get {p}q2 --visibility-timeout 0", 2, r"visibility timeout must be > 0 seconds"),
    ("C33", "get {p}q2 --visibility-timeout -3", 2, r"visibility timeout must be a finite number of seconds >= 0"),
    ("C34", "get {p}q2 --visibility-timeout nan", 2, r"visibility timeout must be a finite number"),
    ("C35", "get {p}q2 --visibility-timeout 1e300", 2, r"visibility timeout must be at most 43200 seconds"),
    ("C36", "get {p}q2 --visibility-timeout 1e12", 2, r"visibility timeout must be at most 43200 seconds"),
    ("C37", ["ack", "{p}q2", ""], 2, NOT_A_RECEIPT),
    ("C38", "ack {p}q2 {random_b64}", 2, NOT_A_RECEIPT),
    # random bytes: another queue's id, or an id no queue hands out (both are refused)
    ("C39", "ack {p}q2 {random_r1}", 2, f"{NOT_A_RECEIPT}|{OTHER_QUEUE}" + r" '{p}q2'"),
    ("C40", "ack {p}q2 r16o0iEcD5T7OZlSgji8", 2, NOT_A_RECEIPT),
    ("C41", "ack {p}q2 {other_queue_receipt}", 2, OTHER_QUEUE + r" '{p}q2': it was issued by another queue"),
    ("C42", "ack {p}q2 r1!!!@@@###", 2, NOT_A_RECEIPT),
    ("C43", "ack {p}q2 {forged_overflow}", 2, NOT_A_RECEIPT),
    ("C44", "change-visibility {p}q2 {forged_overflow} 10", 2, NOT_A_RECEIPT),
    ("C45", "change-visibility {p}q2 {forged_far} 10", 5, r"pop receipt for message 4611686018427387904 of queue '{p}q2' is stale"),
    ("C46", "change-visibility {p}q2 {held_receipt} -5", 2, r"timeout must be a finite number of seconds >= 0, got -5"),
    ("C47", "change-visibility {p}q2 {held_receipt} nan", 2, r"timeout must be a finite number of seconds >= 0, got nan"),
    ("C48", "change-visibility {p}q2 {held_receipt} 1e300", 2, r"timeout must be at most 43200 seconds"),
    ("C49", "change-visibility {p}q2 {held_receipt}", 2, r"the following arguments are required: seconds"),
    ("C51", "ack {p}q2 {acked_receipt}", 5, r"receipt is stale: the message was acked or redelivered since"),
    ("C52", "change-visibility {p}q2 {acked_receipt} 0", 5, r"of queue '{p}q2' is stale"),
    ("C53", "peek {p}q2 --limit 0", 2, r"limit must be a positive integer, got 0"),
    ("C54", "peek {p}q2 --limit -1", 2, r"limit must be a positive integer, got -1"),
    ("C56", "put {p}q2 -", 2, r"payload at position 0 has 1048577 bytes; queue '{p}q2' allows at most 1048576"),
    ("C57", "put {p}q2 -", 2, r"payload at position 0 has 17000000 bytes; queue '{p}q2' allows at most 1048576"),
    ("C61", ["put", "{p}q2", os.fsdecode(b"bad\xff\xfeutf8")], 2, r"payload at position 0 is not valid text: character '\\udcff\\udcfe' at position 3"),
    ("C63", ["create-queue", "my queue"], 2, r"invalid queue name 'my queue': use 1-200 characters"),
    ("C64", ["create-queue", "it's"], 2, r"invalid queue name \"it's\""),
    ("C65", ["create-queue", "очередь"], 2, r"invalid queue name 'очередь'"),
    ("C66", ["create-queue", "x'; DROP KEYSPACE badinput; --"], 2, r"invalid queue name"),
    ("C67", ["put", "x'; DROP KEYSPACE badinput; --", "hi"], 2, r"invalid queue name"),
    ("C68", ["create-queue", "a" * 300], 2, r"invalid queue name 'a+\.\.\.: use 1-200 characters"),
    ("C69b", ["create-queue", "{p}nlq2\n"], 2, r"invalid queue name '{p}nlq2\\n'"),
    ("C70", ["create-queue", ""], 2, r"invalid queue name ''"),
    ("C71", ["create-queue", "--", "-leading"], 2, r"invalid queue name '-leading'"),
    ("C72", "create-queue {p}selfdlq --dead-letter-queue {p}selfdlq", 2, r"a queue cannot be its own dead-letter queue"),
    ("C73", "create-queue {p}dlqmissing --dead-letter-queue {p}nosuchdlq", 4, r"dead-letter queue '{p}nosuchdlq' of queue '{p}dlqmissing' does not exist; create it first"),
    ("C74", ["create-queue", "{p}dlqbad", "--dead-letter-queue", "bad name"], 2, r"invalid dead-letter queue name 'bad name'"),
    ("C76", "delete-queue {p}deltwice", 4, r"queue '{p}deltwice' does not exist"),
    ("C77", "--port 9 stats {p}q1", 1, r"cannot reach Cassandra at 127.0.0.1:9 .*check contactPoints/port"),
    ("C78", "--contact-points 10.255.255.1 stats {p}q1", 1, r"cannot reach Cassandra at 10.255.255.1:9042"),
    ("C78b", "--contact-points 192.0.2.1 stats {p}q1", 1, r"cannot reach Cassandra at 192.0.2.1:9042"),
    ("C78c", "--contact-points 127.0.0.1:70000 stats {p}q1", 2, r"port must be from 1 to 65535, got 70000"),
    ("C79", "--contact-points no.such.host.invalid stats {p}q1", 1, r"cannot resolve any of the contactPoints no.such.host.invalid"),
    ("C80", "--port abc stats {p}q1", 2, r"option 'port' must be an integer, got 'abc'"),
    ("C81", "--port 0 stats {p}q1", 2, r"port must be from 1 to 65535, got 0"),
    ("C82", "--keyspace badinput_nonexistent stats {p}q1", 1, r"not bootstrapped in keyspace 'badinput_nonexistent'; run `cassieq bootstrap`"),
    ("C83", ["--keyspace", "badinput; DROP KEYSPACE badinput", "stats", "{p}q1"], 2, r"keyspace 'badinput; DROP KEYSPACE badinput' is not valid"),
    ("C84", ["--keyspace", KS + "\n", "stats", "{p}q1"], 2, r"keyspace '" + KS + r"\\n' is not valid"),
    ("C85", "--contact-points , stats {p}q1", 2, r"option 'contactPoints' must name at least one host"),
    ("C86", "stats {p}q1", 2, r"consistency must be one of LOCAL_QUORUM, QUORUM, EACH_QUORUM, ALL, got 'SUPER'"),
    ("C87", "--keyspace {rf3ks} bootstrap --create-keyspace --replication-factor 3", 2, r"cannot create keyspace '{rf3ks}': replication factor 3 needs 3 nodes in the cluster .* it has 1 .*nothing was created"),
    # second sweep
    ("C88x", "put {p}q1 hello --delay 43200.5", 2, r"delay must be at most 43200 seconds"),
    ("C89x", "create-queue {p}qx --repair-timeout 1e5", 2, r"repair timeout must be at most 86400 seconds \(24 hours\)"),
    ("C90x", "create-queue {p}qx --max-delivery-count 1001", 2, r"max delivery count must be an integer from 1 to 1000, got 1001"),
    ("C91x", "create-queue {p}qx --message-ttl -1", 2, r"message TTL must be a whole number of seconds from 1"),
    ("C92x", ["create-queue", "{p}tab\tname"], 2, r"invalid queue name"),
    ("C93x", ["create-queue", "{p}" + "z" * 200], 2, r"invalid queue name"),
    ("C94x", "--port 65536 stats {p}q1", 2, r"port must be from 1 to 65535, got 65536"),
    ("C95x", "bootstrap --create-keyspace --replication-factor 11", 2, r"replication factor must be an integer from 1 to 10, got 11"),
    ("C96x", "--keyspace 1ks stats {p}q1", 2, r"keyspace '1ks' is not valid"),
    ("C97x", "change-visibility {p}q2 {held_receipt} 43201", 2, r"timeout must be at most 43200 seconds"),
    ("C98x", "put {p}q1 hello --delay 1e309", 2, r"delay must be a finite number of seconds >= 0, got inf"),
    ("C100x", "bootstrap --replication-factor 3", 2, r"a replication factor only applies when bootstrap creates the keyspace"),
    ("C101x", "--contact-points 127.0.0.1:abc stats {p}q1", 2, r"option 'contactPoints' has '127.0.0.1:abc': the port after ':' must be an integer, got 'abc'"),
    ("C102x", "--local-dc nodc stats {p}q1", 1, r"localDc 'nodc' is not a data center of the cluster at .*; its data centers: \w"),
    ("C99x", ["ack", "{p}q2", "r1" + "A" * 37 + "\n"], 2, NOT_A_RECEIPT),
]
# fmt: on

STDIN = {"C56": b"x" * (1024 * 1024 + 1), "C57": b"y" * 17_000_000}
ENV = {"C86": {"CASSIEQ_CONSISTENCY": "SUPER"}}


def _argv(spec, world, cassieq_options, rf3ks: str) -> list[str]:
    args = spec.split() if isinstance(spec, str) else list(spec)
    values = {"p": P, "rf3ks": rf3ks, **world}
    args = [a.format(**values) if "{" in a else a for a in args]
    base = []
    if "--contact-points" not in args:
        base += ["--contact-points", cassieq_options["contactPoints"]]
        base += ["--port", cassieq_options["port"]]
    if "--keyspace" not in args:
        base += ["--keyspace", KS]
    return base + args


def _cli(argv: list[str], capsys, stdin: bytes | None = None) -> tuple[int, str, str]:
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        status = cli.main(argv)
    except SystemExit as e:
        status = e.code
    finally:
        sys.stdin = old
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize("spec,status,pattern", [pytest.param(*c[1:], id=c[0]) for c in CLI])
def test_cli_bad_input_is_a_clear_error(
    request, spec, status, pattern, world, cassieq_options, cassandra, capsys, monkeypatch
):
    case = request.node.callspec.id
    rf3ks = f"bi_rf3_{uuid.uuid4().hex[:8]}"
    for k, v in ENV.get(case, {}).items():
        monkeypatch.setenv(k, v)
    got, out, err = _cli(_argv(spec, world, cassieq_options, rf3ks), capsys, STDIN.get(case))
    assert got == status, err
    assert "Traceback" not in err and out == ""
    lines = err.strip("\n").split("\n")
    values = {"p": re.escape(P), "rf3ks": rf3ks}
    assert re.search(pattern.format(**values) if "{" in pattern else pattern, lines[-1]), err
    if "usage:" not in err:
        assert len(lines) == 1, err  # the product's own errors: one line
    if case == "C87":  # refused before anything was created
        rows = cassandra.session().execute(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", (rf3ks,)
        )
        assert rows.one() is None


def test_cli_help_lists_the_limits(capsys):
    status, out, _ = _cli(["--help"], capsys)
    assert status == 0
    for text in ("limits", "43200", "86400", "630720000", "1 to 1000", "65536 bytes"):
        assert text in out


# -- the Python client -------------------------------------------------------------------------

Q, Q2 = P + "pyq", P + "pyq2"


def _connect(**kw):
    return QueueClient.connect(**kw)


def _dlq_cycle(q):
    """A dead-letter cycle closed by a delete and re-create (the direct way is refused too:
    the dead-letter queue must exist)."""
    a, b = P + "cycA", P + "cycB"
    with pytest.raises(QueueNotFoundError, match=f"dead-letter queue '{b}' of queue '{a}'"):
        q.create_queue(a, dead_letter_queue=b)
    q.create_queue(b)
    q.create_queue(a, dead_letter_queue=b)
    q.delete_queue(b)
    q.create_queue(b, dead_letter_queue=a)


def _ack_twice(q):
    m = q.get(Q2, visibility_timeout=60)
    return [q.ack(Q2, m.pop_receipt), q.ack(Q2, m.pop_receipt)]


def _delete_twice(q):
    q.create_queue(P + "pydel")
    q.delete_queue(P + "pydel")
    q.delete_queue(P + "pydel")


def _put_to_deleted(q):
    q.create_queue(P + "pydel2")
    q.put(P + "pydel2", b"a")
    q.delete_queue(P + "pydel2")
    q._queues.clear()  # another process would not have it cached either
    q.put(P + "pydel2", b"b")


def _held(q, w):
    return w["held_receipt"]


BIG = "h" * (MAX_HEADERS_BYTES - 16)  # the largest header a message may carry, about

# (id, call(q, w), expected exception type or None, pattern of its message / check of result)
# fmt: off
PY = [
    ("P01", lambda q, w: q.put(Q, None), ConfigError, r"payload at position 0 must be bytes or str, got NoneType"),
    ("P02", lambda q, w: q.put(Q, 12345), ConfigError, r"must be bytes or str, got int"),
    ("P03", lambda q, w: q.put(Q, {"a": 1}), ConfigError, r"must be bytes or str, got dict"),
    ("P04", lambda q, w: q.put(Q, b"x", headers={"k": 1}), ConfigError, r"headers must be a dict of str to str"),
    ("P05", lambda q, w: q.put(Q, b"x", headers={"k": None}), ConfigError, r"headers must be a dict of str to str"),
    ("P06", lambda q, w: q.put(Q, b"x", headers={b"k": "v"}), ConfigError, r"headers must be a dict of str to str"),
    ("P08", lambda q, w: q.put(Q, b"x", headers={"big": "h" * (20 << 20)}), PayloadTooLargeError, r"headers take 20971523 bytes; at most 65536 are allowed"),
    ("P09", lambda q, w: q.put(Q, b"x", headers={"big": "h" * (5 << 20)}), PayloadTooLargeError, r"headers take \d+ bytes; at most 65536"),
    ("P10", lambda q, w: q.put_many(Q, [b"y"] * 200, headers={"big": "h" * (200 << 10)}), PayloadTooLargeError, r"at most 65536"),
    ("P12", lambda q, w: q.put(Q, b"x", delay="soon"), ConfigError, r"delay must be a number of seconds, got 'soon'"),
    ("P13", lambda q, w: q.put(Q, b"x", delay=None), ConfigError, r"delay must be a number of seconds, got None"),
    ("P14", lambda q, w: q.put(Q, b"x", delay=True), ConfigError, r"delay must be a number of seconds, got True"),
    ("P15", lambda q, w: q.put(None, b"x"), ConfigError, r"invalid queue name None"),
    ("P16", lambda q, w: q.put(b"pyq", b"x"), ConfigError, r"invalid queue name b'pyq'"),
    ("P17", lambda q, w: q.put_many(Q, [b"a", b"b", None]), ConfigError, r"payload at position 2 must be bytes or str"),
    ("P18", lambda q, w: q.put_many(Q, (x for x in [b"a", 3])), ConfigError, r"payload at position 1 must be bytes or str, got int"),
    ("P19", lambda q, w: q.put(Q, "bad\udcff"), ConfigError, r"payload at position 0 is not valid text: character '\\udcff' at position 3"),
    ("P20", lambda q, w: q.put(Q, b"z" * (2 << 20)), PayloadTooLargeError, r"payload at position 0 has 2097152 bytes; queue '\w+' allows at most 1048576"),
    ("P21", lambda q, w: q.put_many(Q, [b"a", b"z" * (2 << 20), b"c"]), PayloadTooLargeError, r"payload at position 1 has 2097152 bytes"),
    ("P22", lambda q, w: q.create_queue(P + "b", bucket_size="100"), ConfigError, r"bucket size must be an integer from 1 to 100000, got '100'"),
    ("P23", lambda q, w: q.create_queue(P + "b", bucket_size=100.0), ConfigError, r"bucket size must be an integer .* got 100.0"),
    ("P24", lambda q, w: q.create_queue(P + "b", bucket_size=True), ConfigError, r"bucket size must be an integer .* got True"),
    ("P25", lambda q, w: q.create_queue(P + "b", max_delivery_count=None), ConfigError, r"max delivery count must be an integer from 1 to 1000, got None"),
    ("P27", lambda q, w: q.create_queue(P + "ttlb", message_ttl=True), ConfigError, r"message TTL must be a whole number of seconds .* got True"),
    ("P28", lambda q, w: q.create_queue(P + "b", max_payload_bytes=0), ConfigError, r"max payload bytes must be from 1 to 15728640, got 0"),
    ("P29", lambda q, w: q.create_queue(P + "b", max_payload_bytes=32 << 20), ConfigError, r"max payload bytes must be from 1 to 15728640, got 33554432"),
    ("P30", lambda q, w: q.create_queue(123), ConfigError, r"invalid queue name 123"),
    ("P31", lambda q, w: q.create_queue(P + "self", dead_letter_queue=(P + "self").upper()), QueueNotFoundError, r"dead-letter queue '\w+' of queue '\w+' does not exist; create it first"),
    ("P32", lambda q, w: q.create_queue(Q), QueueExistsError, r"already exists; pass exist_ok=True"),
    ("P33", lambda q, w: q.get(Q, visibility_timeout="abc"), ConfigError, r"visibility timeout must be a number of seconds, got 'abc'"),
    ("P34", lambda q, w: q.ack(Q, None), ConfigError, r"None is not a pop receipt"),
    ("P35", lambda q, w: q.ack(Q, b"r1abc"), ConfigError, r"b'r1abc' is not a pop receipt"),
    ("P36", lambda q, w: q.change_visibility(Q, "r1AAAA", None), ConfigError, r"timeout must be a number of seconds, got None"),
    ("P37", lambda q, w: q.peek(Q, 2.5), ConfigError, r"limit must be a positive integer, got 2.5"),
    ("P39", lambda q, w: _connect(contact_points=["127.0.0.1"], port="65536", keyspace=KS), ConfigError, r"port must be from 1 to 65535, got 65536"),
    ("P40", lambda q, w: _connect(contact_points=None, keyspace=KS), ConfigError, r"contactPoints must be a list of hosts, e.g. \['127.0.0.1'\], got None"),
    ("P41", lambda q, w: _connect(keyspace=None), ConfigError, r"keyspace None is not valid"),
    ("P42", lambda q, w: QueueClient.from_options({"contactPoints": "127.0.0.1", "keyspace": KS, "consistensy": "ONE"}), ConfigError, r"unknown option 'consistensy' for the cassieq connection \(did you mean 'consistency'\?\); allowed: .*consistency"),
    ("P43", lambda q, w: q.bootstrap(True, "3"), ConfigError, r"replication factor must be an integer from 1 to 10, got '3'"),
    ("P44", lambda q, w: q.repair(Q, repair_timeout=-5), ConfigError, r"repair timeout must be a finite number of seconds >= 0, got -5"),
    ("P45", lambda q, w: q.repair(Q, repair_timeout=math.nan), ConfigError, r"repair timeout must be a finite number .* got nan"),
    ("P46", lambda q, w: _ack_twice(q), None, lambda r: r == [True, False]),
    ("P48", lambda q, w: q.change_visibility(Q2, _held(q, w), -1), ConfigError, r"timeout must be a finite number of seconds >= 0, got -1"),
    ("P49", lambda q, w: q.change_visibility(Q2, _held(q, w), math.inf), ConfigError, r"got inf"),
    ("P50", lambda q, w: q.change_visibility(Q2, _held(q, w), 1e300), ConfigError, r"timeout must be at most 43200 seconds \(12 hours\), got 1e\+300"),
    ("P51", lambda q, w: q.change_visibility(Q2, _held(q, w), 1e10), ConfigError, r"timeout must be at most 43200 seconds"),
    ("P52", lambda q, w: q.put(Q2, b"x", headers={str(i): "v" for i in range(100_000)}), PayloadTooLargeError, r"headers have 100000 entries; at most 1000 are allowed"),
    ("P55", lambda q, w: _dlq_cycle(q), ConfigError, r"would form a cycle \(\w+cycB -> \w+cycA -> \w+cycB\)"),
    ("P56", lambda q, w: _delete_twice(q), QueueNotFoundError, r"queue '\w+pydel' does not exist"),
    ("P57", lambda q, w: _put_to_deleted(q), QueueNotFoundError, r"queue '\w+pydel2' does not exist"),
    ("P58", lambda q, w: q.stats(Q2 + "\n"), ConfigError, r"invalid queue name '\w+pyq2\\n'"),
    # second sweep
    ("P59x", lambda q, w: q.put_many(Q, [b"y"] * 300, headers={"big": BIG}), None, lambda r: len(r) == 300),
    ("P60x", lambda q, w: q.put(Q, b"x", headers={f"k{i}": "" for i in range(1001)}), PayloadTooLargeError, r"1001 entries; at most 1000"),
    ("P61x", lambda q, w: q.put(Q, b"x", headers={"k": "bad\udcff"}), ConfigError, r"a header value is not valid text"),
    ("P62x", lambda q, w: q.get(Q, visibility_timeout=False), ConfigError, r"visibility timeout must be a number of seconds, got False"),
    ("P63x", lambda q, w: q.create_queue(P + "b", max_delivery_count=True), ConfigError, r"max delivery count must be an integer .* got True"),
    ("P64x", lambda q, w: q.create_queue(P + "b", visibility_timeout=math.nan), ConfigError, r"visibility timeout must be a finite number .* got nan"),
    ("P65x", lambda q, w: q.create_queue(P + "b", repair_timeout=0), ConfigError, r"repair timeout must be > 0 seconds, got 0"),
    ("P66x", lambda q, w: q.peek(Q, True), ConfigError, r"limit must be a positive integer, got True"),
    ("P67x", lambda q, w: q.put(Q, b"x", delay=float("-0.0") - 1e-9), ConfigError, r"delay must be a finite number of seconds >= 0"),
    ("P68x", lambda q, w: q.ack(Q, w["held_receipt"] + "\n"), ConfigError, r"is not a pop receipt"),
    ("P69x", lambda q, w: QueueClient.from_options({"contactPoints": "127.0.0.1", "keyspace": KS, "queue": "x"}), ConfigError, r"unknown option 'queue' for the cassieq connection"),
    ("P70x", lambda q, w: _connect(contact_points=["127.0.0.1"], keyspace=KS, consistency=1), ConfigError, r"consistency must be a level name like LOCAL_QUORUM, got 1"),
    ("P71x", lambda q, w: q.repair(Q, repair_timeout=True), ConfigError, r"repair timeout must be a number of seconds, got True"),
    ("P72x", lambda q, w: q.create_queue(P + "b", message_ttl=630720001), ConfigError, r"from 1 to 630720000"),
    ("P74x", lambda q, w: q.put_many(Q, b"abc"), ConfigError, r"put_many takes an iterable of payloads, got one bytes; use put\(\)"),
    ("P75x", lambda q, w: q.bootstrap(replication_factor=3), ConfigError, r"a replication factor only applies when bootstrap creates the keyspace"),
    ("P73x", lambda q, w: q.put(Q, b"x", delay="1e400"), ConfigError, r"delay must be a finite number of seconds >= 0, got '1e400'"),
]
# fmt: on


@pytest.mark.parametrize("call,expected,check", [pytest.param(*c[1:], id=c[0]) for c in PY])
def test_client_bad_input(call, expected, check, queue_client, world):
    if expected is None:  # correct behaviour
        result = call(queue_client, world)
        assert check(result), result
        return
    with pytest.raises(CassieQError) as info:
        result = call(queue_client, world)
        if isinstance(result, QueueClient):
            result.close()
    assert isinstance(info.value, expected), repr(info.value)
    text = str(info.value)
    assert "\n" not in text and len(text) < 2000
    assert re.search(check, text), text


# -- the repair job ----------------------------------------------------------------------------

# fmt: off
REPAIR = [
    ("R01", "--queue {p}q1 --frobnicate", 2, r"unrecognized arguments: --frobnicate"),
    ("R02", "--queue {p}nosuchqueue", 4, r"queue '{p}nosuchqueue' does not exist"),
    ("R03", "--queue {p}q1 --loop --interval 0", 2, r"--interval must be > 0 seconds with --loop"),
    ("R04", "--queue {p}q1 --loop --interval -5", 2, r"argument --interval: expected a number of seconds from 0 to 86400 \(a day\) written with ASCII digits, got '-5'"),
    ("R05", "--queue {p}q1 --all-queues", 2, r"argument --all-queues: not allowed with argument --queue"),
    ("R06", "", 2, r"one of the arguments --queue --all-queues is required"),
    ("R07", "--queue {p}q1 --max-buckets 0", 2, r"argument --max-buckets: expected a positive integer, got '0'"),
    ("R08", "--queue {p}q1 --repair-timeout nan", 2, r"argument --repair-timeout: a repair timeout must be a finite number of seconds >= 0, got 'nan'"),
    ("R09", ["--queue", "x'; DROP KEYSPACE badinput; --"], 2, r"invalid queue name \"x'; DROP KEYSPACE badinput; --\""),
    ("R10", "--keyspace badinput_nope --queue {p}q1", 1, r"not bootstrapped in keyspace 'badinput_nope'"),
    ("R11", "--port abc --queue {p}q1", 2, r"option 'port' must be an integer, got 'abc'"),
    ("R12", "--queue {p}q1 --loop --interval soon", 2, r"argument --interval: expected a number of seconds from 0 to 86400 .*, got 'soon'"),
    ("R13", "--queue {p}q1 --master bogus://nowhere", 2, r"argument --master: 'bogus://nowhere' is not a Spark master URL; use local\[N\]"),
    # second sweep
    ("R14x", "--queue {p}q1 --repair-timeout 0", 2, r"a repair timeout must be > 0 seconds, got '0'"),
    ("R15x", "--queue {p}q1 --repair-timeout 1e9", 2, r"a repair timeout must be at most 86400 seconds"),
    ("R16x", ["--queue", "{p}q1\n"], 2, r"invalid queue name '{p}q1\\n'"),
    ("R17x", "--queue {p}q1 --master local[x]", 2, r"'local\[x\]' is not a Spark master URL"),
    ("R18x", "--queue {p}q1 --max-buckets 1.5", 2, r"argument --max-buckets: expected a positive integer, got '1.5'"),
]
# fmt: on


@pytest.fixture(scope="module")
def repair_main():
    path = Path(__file__).resolve().parents[2] / "jobs" / "repair.py"
    spec = importlib.util.spec_from_file_location("cassieq_repair_job", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize("spec,status,pattern", [pytest.param(*c[1:], id=c[0]) for c in REPAIR])
def test_repair_job_bad_input_is_a_clear_error(
    spec, status, pattern, world, cassieq_options, capsys, repair_main
):
    args = spec.split() if isinstance(spec, str) else list(spec)
    args = [a.format(p=P) for a in args]
    base = ["--contact-points", cassieq_options["contactPoints"]]
    if "--port" not in args:
        base += ["--port", cassieq_options["port"]]
    if "--keyspace" not in args:
        base += ["--keyspace", KS]
    try:
        got = repair_main(base + args)
    except SystemExit as e:
        got = e.code
    err = capsys.readouterr().err
    assert got == status, err
    assert "Traceback" not in err
    last = err.strip("\n").split("\n")[-1]
    assert re.search(pattern.format(p=re.escape(P)), last), err
    if "usage:" not in err:
        assert last.startswith("repair: error:") and err.count("\n") == 1, err


class _RecordingPipeline(Pipeline):
    """The real pipeline, noting the header bytes of each batch it sends."""

    def __init__(self, conn):
        super().__init__(conn)
        self.batch_header_bytes: list[int] = []

    def submit(self, statement, params=None, nbytes: int = 0) -> None:
        if isinstance(statement, BatchStatement):
            # each entry: (is_prepared, statement or id, values); headers are value 4
            self.batch_header_bytes.append(
                sum(len(v[4]) for _, _, v in statement._statements_and_parameters if v[4])
            )
        super().submit(statement, params, nbytes=nbytes)


def test_batches_are_sized_by_payload_plus_headers(queue_client, world):
    """P10/S22: batches were sized by payload only, so rows each accepted alone made a batch
    above the frame limit. Small payloads with large headers: every batch stays near the
    batch budget (the old code put all 40 rows, 800 KiB of headers, in one batch)."""
    info = queue_client.get_queue(Q)
    pipe = _RecordingPipeline(queue_client.conn)
    headers = {"big": "h" * (20 * 1024)}
    write_messages(queue_client.conn, info, 10**9, [b"x"] * 40, [headers] * 40, pipeline=pipe)
    pipe.drain()
    assert len(pipe.batch_header_bytes) >= 20
    assert max(pipe.batch_header_bytes) <= BATCH_MAX_BYTES + len(map_bytes(headers))
