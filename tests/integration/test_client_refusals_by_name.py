"""Client calls that used to fail with a raw Python or driver error, or took a wrong value,
now refuse by name: a setting update_queue cannot change, a text where a number goes, a
string for exist_ok, a call on a closed client (sync and async). Real Cassandra."""

from __future__ import annotations

import asyncio

import pytest

from cassieq_spark import AsyncQueueClient, QueueClient
from cassieq_spark.errors import ClientClosedError, ConfigError

pytestmark = [pytest.mark.integration]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"bucket_size": 10}, r"cannot change bucket_size: bucket_size is fixed when the queue"),
        ({"repair_timeout": 5}, r"cannot change repair_timeout: repair_timeout is fixed"),
        ({"foo": 1}, r"cannot change foo: no such setting; it can change visibility_timeout"),
        ({"visibility_timeout": "30"}, r"visibility_timeout must be a number \(int or float\)"),
    ],
)
def test_update_queue_refuses_by_name(queue_client, queue_name, change, error):
    queue_client.create_queue(queue_name, visibility_timeout=20)
    with pytest.raises(ConfigError, match=error):
        queue_client.update_queue(queue_name, **change)
    assert queue_client.get_queue(queue_name).visibility_timeout == 20


def test_create_queue_takes_exist_ok_as_a_bool_only(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    with pytest.raises(ConfigError, match=r"exist_ok must be True or False, got 'no'"):
        queue_client.create_queue(queue_name, exist_ok="no")  # type: ignore[arg-type]


def test_a_closed_client_says_so_even_inside_its_own_consume_loop(
    cassieq_options, queue_client, queue_name
):
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"a", b"b"])
    client = QueueClient.from_options(cassieq_options)
    with pytest.raises(ClientClosedError, match=r"is closed \(close\(\) was called"):
        for _ in client.consume(queue_name, batch=1, wait=0):
            client.close()
    with pytest.raises(ClientClosedError):
        client.put(queue_name, b"x")


def test_a_closed_async_client_says_so(cassieq_options, queue_client, queue_name):
    queue_client.create_queue(queue_name)

    async def scenario() -> None:
        client = await AsyncQueueClient.from_options(cassieq_options)
        await client.close()
        await client.put(queue_name, b"x")

    with pytest.raises(ClientClosedError):
        asyncio.run(scenario())


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            lambda q, n: q.put_many(n, [b"a", b"b"], dedup_ids={"s1", "s2"}),
            r"in the payloads' order: a list or tuple, got a set",
        ),
        (
            lambda q, n: q.put_many(n, [b"a", b"b"], dedup_ids={"d1": 1, "d2": 2}),
            r"in the payloads' order: a list or tuple, got a dict",
        ),
        (
            lambda q, n: q.put_many(n, [b"a"], dedup_ids=iter(["g1", "g2"])),
            r"got more than 1 for 1 payloads",
        ),
        (lambda q, n: q.put(n, b"x", group="\x00"), r"has the control character '\\x00'"),
        (lambda q, n: q.put(n, b"x", group=" "), r"group ' ' is blank"),
    ],
)
def test_puts_refuse_what_would_drop_or_mix_up_a_message(queue_client, queue_name, call, error):
    queue_client.create_queue(queue_name)
    with pytest.raises(ConfigError, match=error):
        call(queue_client, queue_name)
    assert queue_client.stats(queue_name)["enqueued"] == 0


def test_put_many_pairs_ids_from_a_generator_with_the_payloads(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    ids = queue_client.put_many(queue_name, [b"a", b"b"], dedup_ids=(x for x in ["g1", "g2"]))
    again = queue_client.put_many(queue_name, [b"a", b"b"], dedup_ids=["g1", "g2"])
    assert ids == again and len(set(ids)) == 2
