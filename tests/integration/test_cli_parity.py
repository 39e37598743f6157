"""What the client does, the ``cassieq`` command does too: headers, deduplication ids and bulk
NDJSON on ``put``, ``ack-many``, ``update-queue``, every ``create-queue`` setting, the
connection URL; against the real node, through the installed console script."""

from __future__ import annotations

import base64
import json

from support.queues import drain_messages

from cassieq_spark import QueueClient


def test_put_with_headers_and_a_dedup_id(run, queue_client: QueueClient, queue_name):
    assert run("create-queue", queue_name).returncode == 0
    first = run(
        "put", queue_name, "order", "--header", "trace=t1", "--header", "k=a=b", "--dedup-id", "o-1"
    )
    assert first.returncode == 0, first.stderr
    again = run("put", queue_name, "order", "--dedup-id", "o-1")
    assert again.stdout == first.stdout  # the first put's id, nothing enqueued
    got = drain_messages(queue_client, queue_name)
    assert [(m.id, m.payload, m.headers) for m in got] == [
        (int(first.stdout), b"order", {"trace": "t1", "k": "a=b"})
    ]


def test_bad_put_flags_are_refused_before_connecting(run, queue_name):
    for args, words in (
        (["--header", "novalue"], "--header 'novalue' is not KEY=VALUE"),
        (["--header", "k=1", "--header", "k=2"], "--header 'k' is given twice"),
        (["--dedup-id", "has space"], "--dedup-id must be 1-128 printable ASCII"),
    ):
        r = run("put", queue_name, "x", *args)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    r = run("put", queue_name)
    assert r.returncode == 2 and "put needs MESSAGE" in r.stderr
    r = run("put", queue_name, "x", "--ndjson")
    assert r.returncode == 2 and "drop MESSAGE" in r.stderr


def test_bulk_put_from_ndjson(run, queue_client: QueueClient, queue_name):
    run("create-queue", queue_name)
    lines = [
        {"payload": "a", "headers": {"h": "1"}, "dedup_id": "a"},
        {"payload": base64.b64encode(b"\x00\xff").decode(), "encoding": "base64"},
        {"payload": "a again", "dedup_id": "a"},
        {"payload": "later", "delay": 600},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\n\n"
    r = run("put", queue_name, "--ndjson", stdin=stdin)
    assert r.returncode == 0, r.stderr
    ids = [int(x) for x in r.stdout.split()]
    assert len(ids) == 4 and ids[2] == ids[0] and len(set(ids)) == 3
    got = drain_messages(queue_client, queue_name)  # the delayed one is not visible yet
    assert sorted((m.payload, tuple(m.headers.items())) for m in got) == [
        (b"\x00\xff", ()),
        (b"a", (("h", "1"),)),
    ]


def test_bulk_put_names_the_bad_line_and_puts_nothing(run, queue_client, queue_name):
    run("create-queue", queue_name)
    for bad, words in (
        ("not json", "stdin line 2: not JSON"),
        ('["x"]', "stdin line 2: a JSON list, not an object"),
        ('{"payload": 1}', "stdin line 2: 'payload' must be a string"),
        ('{"payload": "x", "dely": 3}', "stdin line 2: unknown field 'dely'"),
        ('{"payload": "x", "delay": -1}', "stdin line 2: delay"),
        ('{"payload": "x", "dedup_id": ""}', "stdin line 2: deduplication id"),
        ('{"payload": "%%", "encoding": "base64"}', "stdin line 2: 'payload' is not base64"),
    ):
        r = run("put", queue_name, "--ndjson", stdin='{"payload": "ok"}\n' + bad + "\n")
        assert r.returncode == 2, r.stderr
        assert words in r.stderr and "nothing was put" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1
    assert queue_client.peek(queue_name) == []


def test_ack_many_from_arguments_and_stdin(run, queue_client: QueueClient, queue_name):
    run("create-queue", queue_name)
    queue_client.put_many(queue_name, [b"1", b"2", b"3"])
    receipts = [m.pop_receipt for m in queue_client.get_many(queue_name, 3)]
    r = run("ack-many", queue_name, *receipts[:2])
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["status"] for x in r.stdout.splitlines()] == ["ok", "ok"]
    # from stdin, with one already acked: every result printed, exit 5
    r = run("ack-many", queue_name, stdin=f"{receipts[2]}\n{receipts[0]}\n")
    assert r.returncode == 5
    assert [json.loads(x)["status"] for x in r.stdout.splitlines()] == ["ok", "stale"]
    assert queue_client.get(queue_name) is None


def test_create_queue_takes_every_setting_and_exist_ok_compares_those_given(run, queue_name):
    dlq = queue_name + "_dlq"
    run("create-queue", dlq)
    r = run(
        "create-queue",
        queue_name,
        "--bucket-size",
        "50",
        "--max-delivery-count",
        "3",
        "--visibility-timeout",
        "12",
        "--repair-timeout",
        "20",
        "--dead-letter-queue",
        dlq,
        "--message-ttl",
        "3600",
        "--max-payload-bytes",
        "2048",
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["bucket_size"], info["max_delivery_count"], info["visibility_timeout"]) == (
        50,
        3,
        12.0,
    )
    assert (info["repair_timeout"], info["dead_letter_queue"]) == (20.0, dlq)
    assert (info["message_ttl"], info["max_payload_bytes"]) == (3600, 2048)
    # exist-ok with nothing given, or what it has: the queue as it is
    assert run("create-queue", queue_name, "--exist-ok").returncode == 0
    assert run("create-queue", queue_name, "--exist-ok", "--bucket-size", "50").returncode == 0
    r = run("create-queue", queue_name, "--exist-ok", "--visibility-timeout", "30")
    assert r.returncode == 1
    assert "visibility_timeout 12.0 (asked 30.0)" in r.stderr and "update-queue" in r.stderr


def test_update_queue(run, queue_name):
    dlq = queue_name + "_dlq"
    run("create-queue", dlq)
    run("create-queue", queue_name)
    r = run(
        "update-queue",
        queue_name,
        "--visibility-timeout",
        "7",
        "--dead-letter-queue",
        dlq,
        "--message-ttl",
        "60",
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["visibility_timeout"], info["dead_letter_queue"], info["message_ttl"]) == (
        7.0,
        dlq,
        60,
    )
    assert info["settings_version"] == 1 and info["updated_at"]
    r = run("update-queue", queue_name, "--no-dead-letter-queue", "--no-message-ttl")
    info = json.loads(r.stdout)
    assert (info["dead_letter_queue"], info["message_ttl"], info["visibility_timeout"]) == (
        None,
        None,
        7.0,
    )
    r = run("update-queue", queue_name)
    assert r.returncode == 2 and "no setting to change" in r.stderr
    r = run("update-queue", queue_name + "_missing", "--max-delivery-count", "2")
    assert r.returncode == 4
    r = run("update-queue", queue_name, "--bucket-size", "5")
    assert r.returncode == 2  # not a setting that changes: argparse refuses the flag


def test_a_connection_url_from_the_flag_and_the_environment(run, cassieq_options, queue_name):
    url = (
        f"cassieq://{cassieq_options['contactPoints'].split(',')[0]}:{cassieq_options['port']}"
        f"/{cassieq_options['keyspace']}"
    )
    r = run(
        "--url",
        url,
        "put",
        queue_name,
        "m",
        env_extra={"CASSIEQ_KEYSPACE": "someone_elses", "CASSIEQ_CONTACT_POINTS": "nowhere"},
    )
    # the flag's parts beat the variables: it reached the test keyspace, where the queue is not
    assert r.returncode == 4, r.stderr
    r = run("create-queue", queue_name, env_extra={"CASSIEQ_URL": url})
    assert r.returncode == 0, r.stderr
    r = run("--url", "127.0.0.1:9042", "list-queues")
    assert r.returncode == 2
    assert "'127.0.0.1:9042' is not a connection URL" in r.stderr
    assert "cassieq://[user@]host[,host...][:port]/keyspace" in r.stderr
