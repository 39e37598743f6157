"""No one where they do not belong, over real HTTP: receipts no one can make up, one 401 body
whatever failed, queue metrics behind a key, unknown accounts cached in a bounded cache,
levels that reach no further than granted, an admin key worth its name, accounts deleted
queues first, signed URLs that end, keys sealed through a key-derivation function, and an
access log clients cannot write lines into."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import secrets
import time
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from support.service_harness import (
    LOOPBACK,
    Server,
    b64url,
    hmac_sig,
    metric,
    signed_headers,
    start_test_server,
    utc,
)

from cassieq_spark.cli import build_parser
from cassieq_spark.errors import ConfigError
from cassieq_spark.service import accounts as accounts_mod
from cassieq_spark.service.accounts import AccountStore, Sealer
from cassieq_spark.service.server import service_config

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("service-security")


@pytest.fixture(scope="module")
def metrics_key(server_dir: Path) -> str:
    key = secrets.token_urlsafe(32)
    (server_dir / "metrics-key").write_text(key)
    return key


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, server_dir, metrics_key):
    s = start_test_server(
        server_dir / "server",
        cassandra,
        cassieq_options,
        "--metrics-key-file",
        str(server_dir / "metrics-key"),
        "--stats-seconds",
        "1",
    )
    yield s
    s.stop()


def account(server: Server) -> tuple[str, dict[str, str]]:
    name = f"sec-{uuid.uuid4().hex[:10]}"
    r = server.admin("POST", "/accounts", name)
    assert r.status == 201, r
    return name, r.json()["keys"]


def key_auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Key {key}", **JSON}


def make_queue(server: Server, name: str, key: str, queue: str, **options) -> None:
    body = json.dumps({"queueName": queue, **options})
    r = server.call("POST", f"/api/v1/accounts/{name}/queues", body, key_auth(key))
    assert r.status == 201, r


def permission(server: Server, name: str, **body) -> str:
    r = server.admin("POST", "/permissions", {"accountName": name, **body})
    assert r.status == 201, r
    return r.json()["queryParam"]


# -- receipts ---------------------------------------------------------------------------------


def made_from(receipt: str, message_id: int, version: int = 1) -> str:
    """A receipt made from a real one: its queue id and tag, another message id and version."""
    raw = base64.urlsafe_b64decode(receipt[2:] + "=" * (-len(receipt[2:]) % 4))
    raw = raw[:16] + message_id.to_bytes(8, "big") + version.to_bytes(4, "big") + raw[28:]
    return receipt[:2] + b64url(raw)


def message_id(receipt: str) -> int:
    raw = base64.urlsafe_b64decode(receipt[2:] + "=" * (-len(receipt[2:]) % 4))
    return int.from_bytes(raw[16:24], "big")


def test_a_receipt_made_from_another_in_flight_message_s_id_is_refused(server):
    """Seven messages in flight to seven gets; the holder of the fourth makes receipts for its
    id -3 and +3 (version 1). v1 ack and update and v2 ack and visibility refuse them; every
    real holder still acks."""
    name, keys = account(server)
    make_queue(server, name, keys["primary"], "q")
    base = f"/api/v1/accounts/{name}/queues/q"
    v2 = f"/api/v2/accounts/{name}/queues/q"
    auth = key_auth(keys["primary"])
    for i in range(7):
        assert server.call("POST", f"{base}/messages", f"m{i}", auth).status == 201
    got = [server.call("GET", f"{base}/messages/next", headers=auth).json() for _ in range(7)]
    receipts = sorted((r["popReceipt"] for r in got), key=message_id)
    own = receipts[3]
    for made in (made_from(own, message_id(own) - 3), made_from(own, message_id(own) + 3)):
        assert made not in receipts
        r = server.call("DELETE", f"{base}/messages?popReceipt={made}", headers=auth)
        assert r.status == 400, r
        r = server.call("PUT", f"{base}/messages?popReceipt={made}", '{"message":"x"}', auth)
        assert r.status == 400, r
        r = server.call("POST", f"{v2}/messages/ack", json.dumps({"popReceipts": [made]}), auth)
        assert [x["status"] for x in r.json()["results"]] == ["invalid"], r.json()
        body = json.dumps({"entries": [{"popReceipt": made, "invisibilityTimeSeconds": 0}]})
        r = server.call("POST", f"{v2}/messages/visibility", body, auth)
        assert [x["status"] for x in r.json()["results"]] == ["invalid"], r.json()
    for receipt in receipts:
        r = server.call("DELETE", f"{base}/messages?popReceipt={receipt}", headers=auth)
        assert r.status == 204, r


# -- tenants apart ----------------------------------------------------------------------------


def test_401_bodies_are_the_same_whether_or_not_the_account_exists(server):
    name, keys = account(server)
    ghost = f"ghost-{uuid.uuid4().hex[:10]}"
    et = utc(time.time() + 600)
    bodies = {}
    for who in (name, ghost):
        base = f"/api/v1/accounts/{who}/queues"
        wrong = b64url(os.urandom(64))
        bodies[who] = [
            server.call("GET", base, headers={"Authorization": f"Key {wrong}"}),
            server.call("GET", base, headers=signed_headers(who, wrong, "GET", base)),
            server.call("GET", f"{base}?auth=g&et={et}&sig={hmac_sig(wrong, who + 'x')}"),
            server.call("GET", f"{base}?auth=g&st=2000-01-01T00:00:00Z&et={et}&sig=x"),
            server.call("GET", base),
        ]
    for known, unknown in zip(bodies[name], bodies[ghost], strict=True):
        assert (
            (known.status, known.body)
            == (unknown.status, unknown.body)
            == (
                401,
                b'{"code":401,"message":"HTTP 401 Unauthorized"}',
            )
        )


def test_queue_metrics_and_dashboard_data_need_the_metrics_or_the_admin_key(server, metrics_key):
    """Without the metrics or the admin key no queue series and no account name; with either
    the queue series (of at most 200 queues of the shared test keyspace: not always this
    test's)."""
    name, keys = account(server)
    make_queue(server, name, keys["primary"], "secretive")
    for path in ("/metrics", "/dashboard/queues"):
        for headers in ({}, {"Authorization": f"Key {keys['primary']}"}):
            r = server.call("GET", path, headers=headers)
            assert r.status == 401 and name.encode() not in r.body, (path, r)
            assert b"cassieq_queue" not in r.body and b"backlog" not in r.body, (path, r)
    # the queue stats are a snapshot refreshed in the background (every second here)
    deadline = time.monotonic() + 10
    for key in (metrics_key, server.admin_key):
        while True:
            r = server.call("GET", "/metrics", headers={"Authorization": f"Bearer {key}"})
            assert r.status == 200, r
            if b'cassieq_queue_backlog{queue="' in r.body or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert b'cassieq_queue_backlog{queue="' in r.body
    r = server.call("GET", "/dashboard/queues", headers={"Authorization": f"Bearer {metrics_key}"})
    assert r.status == 200 and r.json() and {"queue", "backlog"} <= set(r.json()[0]), r.status


def test_unknown_accounts_are_read_once_per_cache_period(server):
    """Fifteen made-up names, each asked twice: fifteen account reads, not thirty."""
    ghosts = [f"ghost-{uuid.uuid4().hex[:12]}" for _ in range(15)]

    def reads() -> float:
        text = server.call("GET", "/metrics", headers=server.operator()).body.decode()
        return metric(text, "cassieq_account_reads_total")

    before = reads()
    for ghost in ghosts * 2:
        r = server.call(
            "GET", f"/api/v1/accounts/{ghost}/queues", headers={"Authorization": "Key x"}
        )
        assert r.status == 401
    assert reads() - before == 15


def test_made_up_names_never_push_a_real_account_out_of_the_cache(
    server, queue_client, monkeypatch
):
    """The cache of names that are no account is bounded on its own: 100 made-up names leave
    20 of them cached (the newest) and the real account where it was."""
    monkeypatch.setattr(accounts_mod, "MAX_UNKNOWN", 20)
    name, _keys = account(server)
    store = AccountStore(queue_client.conn, Sealer(secrets.token_bytes(32)))
    read: list[int] = []
    store.on_read = lambda: read.append(1)
    assert store.get(name) is not None
    ghosts = [f"ghost-{i}-{uuid.uuid4().hex[:8]}" for i in range(100)]
    for ghost in ghosts:
        assert store.get(ghost) is None
    assert len(read) == 101
    assert store.cached(name)[0]
    assert all(store.cached(g) == (True, None) for g in ghosts[-20:])
    assert not any(store.cached(g)[0] for g in ghosts[:80])


# -- levels -----------------------------------------------------------------------------------


def test_a_read_only_signed_url_cannot_redrive_into_another_queue(server):
    name, keys = account(server)
    key = keys["primary"]
    make_queue(server, name, key, "dlq")
    make_queue(server, name, key, "payments")
    make_queue(server, name, key, "work", dlqName="dlq")
    base = f"/api/v1/accounts/{name}/queues"
    assert server.call("POST", f"{base}/dlq/messages", "dead", key_auth(key)).status == 201
    redrive = f"/api/v2/accounts/{name}/queues/dlq/redrive"
    body = json.dumps({"to": "payments"})
    read_only = permission(server, name, levels=["r"], queueName="dlq")
    r = server.call("POST", f"{redrive}?{read_only}", body, JSON)
    assert r.status == 403, r
    # every level, but the claim names the dead-letter queue alone
    claimed = permission(server, name, levels=["r", "a", "p"], queueName="dlq")
    r = server.call("POST", f"{redrive}?{claimed}", body, JSON)
    assert r.status == 403 and b"only" in r.body, r
    stats = server.call("GET", f"{base}/payments/statistics", headers=key_auth(key)).json()
    assert stats == {"size": 0}
    r = server.call("POST", redrive, body, key_auth(key))
    assert r.status == 200 and r.json()["moved"] == 1, r


def test_a_signed_url_for_one_queue_cannot_point_its_dead_letters_at_another(server):
    name, keys = account(server)
    make_queue(server, name, keys["primary"], "work")
    make_queue(server, name, keys["primary"], "elsewhere")
    settings = permission(server, name, levels=["c", "g"], queueName="work")
    path = f"/api/v2/accounts/{name}/queues/work?{settings}"
    r = server.call("PATCH", path, json.dumps({"dlqName": "elsewhere"}), JSON)
    assert r.status == 403, r
    r = server.call("PATCH", path, json.dumps({"maxDeliveryCount": 3}), JSON)
    assert r.status == 200 and r.json()["dlqName"] is None, r


# -- the admin key ----------------------------------------------------------------------------


def test_a_one_character_admin_key_or_a_short_secret_is_refused_at_start(tmp_path):
    """What ``cassieq serve`` reads its settings with, before it connects to anything."""
    (tmp_path / "secret").write_text(secrets.token_urlsafe(32))
    (tmp_path / "short").write_text("sixteen-chars-ok")
    (tmp_path / "a").write_text("a")
    (tmp_path / "admin").write_text(secrets.token_urlsafe(24))

    def start(secret: str, admin: str):
        flags = ["serve", "--secret-file", str(tmp_path / secret)]
        return service_config(
            build_parser().parse_args([*flags, "--admin-key-file", str(tmp_path / admin)]), {}
        )

    with pytest.raises(ConfigError, match=r"admin key \(--admin-key-file\) has 1 characters"):
        start("secret", "a")
    with pytest.raises(ConfigError, match="service secret has 16 bytes; it needs at least 32"):
        start("short", "admin")
    assert start("secret", "admin").admin_key == (tmp_path / "admin").read_text()


def test_keys_are_shown_once_and_listed_by_name(server):
    name, keys = account(server)
    for path in ("/accounts", f"/accounts/{name}"):
        r = server.admin("GET", path)
        assert r.status == 200 and not any(k.encode() in r.body for k in keys.values()), r
    assert server.admin("GET", f"/accounts/{name}").json() == {
        "accountName": name,
        "keyNames": ["primary", "secondary"],
    }


def test_failed_admin_attempts_are_limited_per_address(server):
    """From another loopback address: 20 wrong keys, then even the right one is 429 there,
    while the admin on the usual address is served."""

    def admin_call(key: str, source: str) -> int:
        conn = http.client.HTTPConnection(LOOPBACK, server.port, source_address=(source, 0))
        try:
            conn.request("GET", "/admin/api/v1/accounts", headers={"Authorization": f"Key {key}"})
            return conn.getresponse().status
        finally:
            conn.close()

    assert {admin_call("wrong-" + str(i), "127.0.0.2") for i in range(20)} == {401}
    assert admin_call("wrong", "127.0.0.2") == 429
    assert admin_call(server.admin_key, "127.0.0.2") == 429
    assert admin_call(server.admin_key, LOOPBACK) == 200


def test_an_account_s_name_is_free_again_only_once_its_queues_are_gone(server, queue_client):
    name, keys = account(server)
    make_queue(server, name, keys["primary"], "q")
    assert server.admin("DELETE", f"/accounts/{name}").status == 204
    assert not [q for q in queue_client.list_queues() if q.name.startswith(name + ".")]
    # a queue of the name made after the delete (another instance's cache, the Python client)
    queue_client.create_queue(f"{name}.late")
    queue_client.put(f"{name}.late", b"left behind")
    r = server.admin("POST", "/accounts", name)
    assert r.status == 409 and b"late" in r.body, r
    assert server.admin("DELETE", f"/accounts/{name}").status == 204  # sweeps what remains
    assert server.admin("DELETE", f"/accounts/{name}").status == 404
    r = server.admin("POST", "/accounts", name)
    assert r.status == 201
    listed = server.call(
        "GET", f"/api/v1/accounts/{name}/queues", headers=key_auth(r.json()["keys"]["primary"])
    )
    assert listed.json() == []
    # adopting the queues of the name is a choice made out loud
    other = f"sec-{uuid.uuid4().hex[:10]}"
    queue_client.create_queue(f"{other}.mine")
    r = server.admin("POST", "/accounts", {"accountName": other, "adoptQueues": True})
    assert r.status == 201, r


# -- signed URLs ------------------------------------------------------------------------------


def test_signed_urls_end_by_default_and_within_the_longest_lifetime(server):
    name, keys = account(server)
    make_queue(server, name, keys["primary"], "q")
    base = f"/api/v1/accounts/{name}/queues/q"
    qp = permission(server, name, levels=["g"], queueName="q")
    et = time.mktime(time.strptime(qp.split("et=")[1].split("&")[0], "%Y-%m-%dT%H:%M:%SZ"))
    ends_in = et - time.timezone - time.time()
    assert 24 * 3600 - 60 < ends_in <= 24 * 3600 + 1
    assert server.call("GET", f"{base}?{qp}").status == 200
    far = utc(time.time() + 8 * 24 * 3600)
    r = server.admin("POST", "/permissions", {"accountName": name, "levels": ["g"], "endTime": far})
    assert r.status == 422, r
    # signed with the account key by hand: without an end, or ending past the longest lifetime
    key = keys["primary"]
    forever = hmac_sig(key, f"{name}\ng\nq:q")
    assert server.call("GET", f"{base}?auth=g&q=q&sig={forever}").status == 401
    late = hmac_sig(key, f"{name}\ng\nendTime:{far}\nq:q")
    assert server.call("GET", f"{base}?auth=g&q=q&et={far}&sig={late}").status == 401
    soon = utc(time.time() + 3600)
    ok = hmac_sig(key, f"{name}\ng\nendTime:{soon}\nq:q")
    assert server.call("GET", f"{base}?auth=g&q=q&et={soon}&sig={ok}").status == 200


# -- keys at rest -----------------------------------------------------------------------------


def test_keys_are_sealed_through_scrypt_and_old_seals_are_sealed_again(
    server, server_dir, cassandra, cassieq_options
):
    session = cassandra.session()
    ks = cassieq_options["keyspace"]
    name, keys = account(server)
    rows = session.execute(
        f"SELECT key_name, sealed FROM {ks}.service_account_keys WHERE account = %s", (name,)
    )
    assert {r.sealed[:1] for r in rows} == {b"\x02"}
    # a key sealed the earlier way (under a SHA-256 of the secret), for an account not yet read
    secret = (server_dir / "server" / "secret").read_text().strip().encode()
    old = AESGCM(hashlib.sha256(b"cassieq-service-keys\n" + secret).digest())
    legacy_name, legacy_key = f"sec-{uuid.uuid4().hex[:10]}", b64url(os.urandom(64))
    nonce = os.urandom(12)
    sealed = b"\x01" + nonce + old.encrypt(nonce, legacy_key.encode(), f"{legacy_name}\nk".encode())
    session.execute(f"INSERT INTO {ks}.service_accounts (account) VALUES (%s)", (legacy_name,))
    session.execute(
        f"INSERT INTO {ks}.service_account_keys (account, key_name, sealed) VALUES (%s, 'k', %s)",
        (legacy_name, sealed),
    )
    url = f"/api/v1/accounts/{legacy_name}/queues"
    assert server.call("GET", url, headers=key_auth(legacy_key)).status == 200
    row = session.execute(
        f"SELECT sealed FROM {ks}.service_account_keys WHERE account = %s", (legacy_name,)
    ).one()
    assert row.sealed[:1] == b"\x02" and legacy_key.encode() not in row.sealed


# -- the access log ---------------------------------------------------------------------------


def test_a_client_cannot_write_a_line_into_the_access_log(server):
    forged = "1.2.3.4 DELETE /api/v1/accounts/a/queues/q 200 1.0ms account=a id=0"
    path = "/x%0A" + forged.replace(" ", "%20")
    assert server.call("GET", path).status == 404
    deadline = time.monotonic() + 5
    while "1.2.3.4" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = server.log()
    assert "/x\\n1.2.3.4\\x20DELETE" in log
    assert not any(line.lstrip().startswith("1.2.3.4") for line in log.splitlines())
    assert forged not in log
