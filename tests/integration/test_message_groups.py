"""Message groups on one client against the real Cassandra (docs/groups.md): a group's messages
in id order, one in flight at a time, the head delivered again after its visibility expires,
grouped acks that a stale receipt cannot make; every test also runs with every
compare-and-set's reply lost (the ``fault_mode`` fixture)."""

from __future__ import annotations

import subprocess
import time

import pytest

from cassieq_spark.errors import ConfigError
from tests.support.fixtures import CONSOLE_SCRIPT

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]


def _by_group(messages):
    return {m.group: m for m in messages}


def test_get_many_delivers_one_message_per_group_in_id_order(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30, bucket_size=4)
    a = q.put_many(queue_name, ["a1", "a2", "a3"], group="a")
    b = q.put_many(queue_name, ["b1", "b2"], group="b")
    plain = q.put_many(queue_name, ["p1", "p2"])
    first = q.get_many(queue_name, max_messages=10)
    assert sorted(m.id for m in first) == sorted([a[0], b[0], *plain])
    assert _by_group(first)["a"].payload == b"a1" and _by_group(first)["a"].group == "a"
    assert q.get_many(queue_name, max_messages=10) == []  # both groups held, nothing else
    assert q.get(queue_name) is None
    assert q.ack(queue_name, _by_group(first)["a"].pop_receipt)
    nxt = q.get_many(queue_name, max_messages=10)
    assert [m.id for m in nxt] == [a[1]]  # a moves on, b still held by b1
    assert q.ack_many(queue_name, [nxt[0].pop_receipt, _by_group(first)["b"].pop_receipt])[0].ok
    rest = q.get_many(queue_name, max_messages=10)
    assert sorted(m.id for m in rest) == [a[2], b[1]]
    assert all(r.ok for r in q.ack_many(queue_name, [m.pop_receipt for m in rest]))
    assert q.get_many(queue_name, max_messages=10) == []
    assert q.stats(queue_name)["in_flight"] == 2  # the ungrouped p1, p2


def test_get_takes_the_next_group_while_one_is_held(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    a = q.put_many(queue_name, ["a1", "a2"], group="a")
    b = q.put(queue_name, "b1", group="b")
    m1, m2 = q.get(queue_name), q.get(queue_name)
    assert (m1.id, m2.id) == (a[0], b)
    assert q.get(queue_name) is None
    assert q.ack(queue_name, m1.pop_receipt)
    m3 = q.get(queue_name)
    assert m3.id == a[1] and m3.delivery_count == 1


def test_an_expired_head_is_delivered_again_before_the_next_and_its_old_receipt_cannot_ack(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    ids = q.put_many(queue_name, ["1", "2", "3"], group="g")
    head = q.get(queue_name, visibility_timeout=1)
    assert head.id == ids[0]
    time.sleep(1.3)
    again = q.get_many(queue_name, max_messages=10, visibility_timeout=30)
    assert [(m.id, m.delivery_count) for m in again] == [(ids[0], 2)]  # the head, not the next
    assert not q.ack(queue_name, head.pop_receipt)  # stale: the redelivery holds it
    assert q.ack_many(queue_name, [head.pop_receipt])[0].status == "stale"
    assert q.get(queue_name) is None  # still held by the redelivery
    assert q.ack(queue_name, again[0].pop_receipt)
    assert q.get(queue_name).id == ids[1]


def test_an_ack_after_the_visibility_expired_but_before_a_redelivery_releases_the_group(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=30)
    ids = q.put_many(queue_name, ["1", "2"], group="g")
    head = q.get(queue_name, visibility_timeout=1)
    time.sleep(1.3)
    assert q.ack(queue_name, head.pop_receipt)  # nobody else holds it: the ack wins
    assert q.get(queue_name).id == ids[1]


def test_a_dead_lettered_head_releases_its_group(queue_client, queue_name):
    q = queue_client
    dlq = f"{queue_name}_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, max_delivery_count=1, dead_letter_queue=dlq)
    ids = q.put_many(queue_name, ["1", "2"], group="g")
    assert q.get(queue_name, visibility_timeout=1).id == ids[0]
    time.sleep(1.3)
    nxt = q.get(queue_name)  # the head reached its delivery limit: moved, the group moves on
    assert nxt is not None and nxt.id == ids[1]
    dead = q.get(dlq)
    assert dead.payload == b"1" and dead.group == "g"


def test_peek_and_the_command_line_show_the_group(queue_client, queue_name, cassieq_options):
    q = queue_client
    q.create_queue(queue_name)
    env = {
        "CASSIEQ_CONTACT_POINTS": cassieq_options["contactPoints"],
        "CASSIEQ_PORT": cassieq_options["port"],
        "CASSIEQ_KEYSPACE": cassieq_options["keyspace"],
        "PATH": "/usr/bin:/bin",
    }
    put = subprocess.run(
        [str(CONSOLE_SCRIPT), "put", queue_name, "hello", "--group", "acct-1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert put.returncode == 0, put.stderr
    (m,) = q.peek(queue_name, 10)
    assert m.id == int(put.stdout) and m.group == "acct-1"
    assert m.as_dict()["group"] == "acct-1"
    assert q.get(queue_name).group == "acct-1"


def test_grouped_delays_and_bad_groups_are_refused(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name)
    with pytest.raises(ConfigError, match="cannot be delayed"):
        q.put(queue_name, "x", group="g", delay=5)
    with pytest.raises(ConfigError, match="cannot be delayed"):
        q.put(queue_name, "x", headers={"cassieq-group": "g"}, delay=5)
    with pytest.raises(ConfigError, match="1 to 128 characters"):
        q.put(queue_name, "x", group="")
    with pytest.raises(ConfigError, match="1 to 128 characters"):
        q.put(queue_name, "x", group="g" * 129)
    with pytest.raises(ConfigError, match="must be a str"):
        q.put(queue_name, "x", group=7)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="give one"):
        q.put(queue_name, "x", group="g", headers={"cassieq-group": "h"})
    assert q.put(queue_name, "x", headers={"cassieq-group": "h"}) >= 0  # the header is the group
    assert q.get(queue_name).group == "h"
