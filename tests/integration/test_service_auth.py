"""Accounts and auth over real HTTP: the three schemes of the original (Key, Signed,
signed URLs) with their 401/403 split, the spec's signing examples, account isolation, the
admin API behind its key, and keys sealed at rest."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from support.service_harness import (
    Server,
    hmac_sig,
    signed_headers,
    start_test_server,
    utc,
)

from cassieq_spark.service import signing

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(cassandra, queue_client, cassieq_options, tmp_path_factory):
    s = start_test_server(
        tmp_path_factory.mktemp("service-auth"),
        cassandra,
        cassieq_options,
    )
    yield s
    s.stop()


def account(server: Server) -> tuple[str, dict[str, str]]:
    name = f"acct-{uuid.uuid4().hex[:10]}"
    r = server.admin("POST", "/accounts", name)
    assert r.status == 201, r
    return name, r.json()["keys"]


def with_queue(server: Server, name: str, key: str, queue: str = "q1") -> None:
    r = server.call(
        "POST",
        f"/api/v1/accounts/{name}/queues",
        json.dumps({"queueName": queue}),
        {"Authorization": f"Key {key}", **JSON},
    )
    assert r.status == 201, r


UNAUTHORIZED = {"code": 401, "message": "HTTP 401 Unauthorized"}
FORBIDDEN = {"code": 403, "message": "HTTP 403 Forbidden"}


def shape(r) -> dict:
    body = r.json()
    return {"code": body["code"], "message": body["message"]}


# -- the spec's signing examples ------------------------------------------------------------------


def test_the_signing_strings_are_the_specs():
    """Section 3.2's worked example and section 6's claim strings, byte for byte."""
    when = signing.parse_time("2016-04-18T19:22:53Z")
    assert signing.request_string("acct", "GET", "/api/v1/accounts/acct/queues/", when) == (
        "acct\nGET\n/api/v1/accounts/acct/queues\n2016-04-18T19:22:53Z"
    )
    assert signing.url_string("account", frozenset("gapr")) == "account\nrpag"
    st, et = signing.parse_time("2026-11-25T09:40:08Z"), signing.parse_time("2026-11-25T10:41:08Z")
    assert signing.url_string("account", frozenset("gp"), st, et, "q1") == (
        "account\npg\nstartTime:2026-11-25T09:40:08Z\nendTime:2026-11-25T10:41:08Z\nq:q1"
    )
    assert signing.signed_query("a2V5", "account", frozenset("gp"), st, et, "q1").startswith(
        "auth=pg&q=q1&st=2026-11-25T09:40:08Z&et=2026-11-25T10:41:08Z&sig="
    )
    # offsets are re-printed in UTC; milliseconds are refused
    assert (
        signing.utc_text(signing.parse_time("2016-04-26T02:06:07+02:00")) == "2016-04-26T00:06:07Z"
    )
    assert signing.parse_time("2016-04-26T00:06:07.123Z") is None


def test_signatures_match_the_specs_python_equivalent():
    """The spec's one-liner: urlsafe_b64encode(hmac(urlsafe_b64decode(key + '=='), s)) without '='."""
    import base64
    import hashlib
    import hmac

    key = signing.new_key()
    assert len(key) == 86
    s = "acct\nGET\n/api/v1/accounts/acct/queues\n2016-04-18T19:22:53Z"
    expected = base64.urlsafe_b64encode(
        hmac.new(base64.urlsafe_b64decode(key + "=="), s.encode(), hashlib.sha256).digest()
    ).rstrip(b"=")
    assert signing.sign(key, s) == expected.decode()


# -- Key -----------------------------------------------------------------------------------------


def test_key_auth_takes_the_primary_and_the_secondary_key_and_refuses_others(server):
    name, keys = account(server)
    url = f"/api/v1/accounts/{name}/queues"
    for key in keys.values():
        assert server.call("GET", url, headers={"Authorization": f"Key {key}"}).status == 200
        assert server.call("GET", url, headers={"Authorization": f"key   {key} "}).status == 200
    for header in (f"Key {signing.new_key()}", "Key ", "Key", "Bearer x", "Signed garbage"):
        r = server.call("GET", url, headers={"Authorization": header})
        assert (r.status, shape(r)) == (401, UNAUTHORIZED), header


def test_an_unknown_account_is_401(server):
    _, keys = account(server)
    r = server.call(
        "GET",
        "/api/v1/accounts/nobody-here/queues",
        headers={"Authorization": f"Key {keys['primary']}"},
    )
    assert (r.status, shape(r)) == (401, UNAUTHORIZED)


def test_one_accounts_key_never_reaches_another_accounts_queues(server):
    a, a_keys = account(server)
    b, b_keys = account(server)
    with_queue(server, b, b_keys["primary"], "secret_q")
    server.call(
        "POST",
        f"/api/v1/accounts/{b}/queues/secret_q/messages",
        "b's",
        {"Authorization": f"Key {b_keys['primary']}"},
    )
    for key in a_keys.values():
        h = {"Authorization": f"Key {key}"}
        for method, tail in (
            ("GET", "/secret_q"),
            ("GET", "/secret_q/messages/next"),
            ("POST", "/secret_q/messages"),
            ("DELETE", "/secret_q"),
            ("GET", ""),
        ):
            r = server.call(method, f"/api/v1/accounts/{b}/queues{tail}", "x", h)
            assert r.status == 401, (method, tail)
        # signed with a's key for b's path
        path = f"/api/v1/accounts/{b}/queues/secret_q/messages/next"
        assert server.call("GET", path, headers=signed_headers(b, key, "GET", path)).status == 401
    # a's own queue list does not show b's queue (the original's listed every account's)
    mine = server.call(
        "GET", f"/api/v1/accounts/{a}/queues", headers={"Authorization": f"Key {a_keys['primary']}"}
    )
    assert mine.json() == []
    # and a's path cannot name b's queue
    r = server.call(
        "GET",
        f"/api/v1/accounts/{a}/queues/{b}.secret_q",
        headers={"Authorization": f"Key {a_keys['primary']}"},
    )
    assert r.status == 404
    assert server.call(
        "GET",
        f"/api/v1/accounts/{b}/queues/secret_q/statistics",
        headers={"Authorization": f"Key {b_keys['primary']}"},
    ).json() == {"size": 1}


# -- Signed --------------------------------------------------------------------------------------


def test_signed_requests_verify_with_either_key_and_within_the_skew(server):
    name, keys = account(server)
    with_queue(server, name, keys["primary"])
    path = f"/api/v1/accounts/{name}/queues/q1/messages"
    for key in keys.values():
        r = server.call("POST", path, "signed", signed_headers(name, key, "POST", path))
        assert r.status == 201
    now = time.time()
    # a trailing slash and extra (unsigned) query parameters still verify
    h = signed_headers(name, keys["primary"], "GET", path + "/next")
    assert server.call("GET", path + "/next/?x=1", headers=h).status == 200
    # lower-case scheme; +30 s is inside the default 60 s skew
    h = signed_headers(name, keys["primary"], "GET", path + "/next", now + 30)
    h["Authorization"] = h["Authorization"].replace("Signed", "signed")
    assert server.call("GET", path + "/next", headers=h).status in (200, 204)
    # an offset in the header, signed in its UTC form
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
    sig = hmac_sig(keys["primary"], "\n".join([name, "GET", path + "/next", utc(now)]))
    h = {"Authorization": f"Signed {sig}", "X-Cassieq-Request-Time": stamp}
    assert server.call("GET", path + "/next", headers=h).status in (200, 204)


@pytest.mark.parametrize(
    "case",
    [
        "stale-time",
        "future-time",
        "millis",
        "no-time",
        "wrong-key",
        "wrong-method",
        "other-account-name",
        "offset-signed",
    ],
)
def test_bad_signed_requests_are_401(server, case):
    name, keys = account(server)
    with_queue(server, name, keys["primary"])
    path = f"/api/v1/accounts/{name}/queues/q1"
    now = time.time()
    h = signed_headers(name, keys["primary"], "GET", path)
    if case == "stale-time":
        h = signed_headers(name, keys["primary"], "GET", path, now - 120)
    elif case == "future-time":
        h = signed_headers(name, keys["primary"], "GET", path, now + 120)
    elif case == "millis":
        h["X-Cassieq-Request-Time"] = h["X-Cassieq-Request-Time"][:-1] + ".123Z"
    elif case == "no-time":
        del h["X-Cassieq-Request-Time"]
    elif case == "wrong-key":
        h = signed_headers(name, signing.new_key(), "GET", path)
    elif case == "wrong-method":
        h = signed_headers(name, keys["primary"], "DELETE", path)
    elif case == "other-account-name":
        h = signed_headers("someone-else", keys["primary"], "GET", path)
    elif case == "offset-signed":
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
        sig = hmac_sig(keys["primary"], "\n".join([name, "GET", path, stamp]))
        h = {"Authorization": f"Signed {sig}", "X-Cassieq-Request-Time": stamp}
    r = server.call("GET", path, headers=h)
    assert (r.status, shape(r)) == (401, UNAUTHORIZED)


# -- signed URLs ---------------------------------------------------------------------------------


def permission(server: Server, name: str, **req) -> str:
    r = server.admin("POST", "/permissions", {"accountName": name, "keyName": "primary", **req})
    assert r.status == 201, r
    return r.json()["queryParam"]


def test_a_claim_grants_its_levels_and_403s_the_others(server):
    name, keys = account(server)
    with_queue(server, name, keys["primary"])
    qp = permission(server, name, levels=["p", "ReadMessage", "a", "g"])
    assert qp.startswith("auth=rpag&et=")  # issued without an end: it ends by default
    base = f"/api/v1/accounts/{name}/queues"
    assert server.call("GET", f"{base}?{qp}").status == 200
    assert server.call("POST", f"{base}/q1/messages?{qp}", "m").status == 201
    assert server.call("GET", f"{base}/q1/messages/next?{qp}").status == 200
    for method, tail, body in (("POST", "", '{"queueName":"x"}'), ("DELETE", "/q1", None)):
        r = server.call(method, f"{base}{tail}?{qp}", body, JSON)
        assert (r.status, shape(r)) == (403, FORBIDDEN)
    # any permutation of the levels verifies
    et, sig = qp.split("et=")[1].split("&sig=")
    assert server.call("GET", f"{base}?auth=gapr&et={et}&sig={sig}").status == 200
    # a tampered signature, or more levels than signed, is 401
    assert server.call("GET", f"{base}?auth=rpag&et={et}&sig={sig[:-2]}AA").status == 401
    assert server.call("GET", f"{base}?auth=rpagcd&et={et}&sig={sig}").status == 401
    # a Key header with a wrong key wins over a valid claim; an unknown scheme is ignored
    assert server.call("GET", f"{base}?{qp}", headers={"Authorization": "Key wrong"}).status == 401
    assert server.call("GET", f"{base}?{qp}", headers={"Authorization": "Bearer zzz"}).status == 200


def test_a_claim_for_one_queue_and_time_window(server):
    name, keys = account(server)
    with_queue(server, name, keys["primary"], "q1")
    with_queue(server, name, keys["primary"], "q2")
    now = time.time()
    qp = permission(
        server,
        name,
        levels=["g", "p"],
        queueName="q1",
        startTime=utc(now - 60),
        endTime=utc(now + 3600),
    )
    assert qp.startswith("auth=pg&q=q1&st=")
    base = f"/api/v1/accounts/{name}/queues"
    assert server.call("GET", f"{base}/q1?{qp}").status == 200
    assert server.call("GET", f"{base}/q2?{qp}").status == 401  # wrong queue in the claim
    assert server.call("GET", f"{base}?{qp}").status == 401  # list: no queue to match
    expired = permission(server, name, levels=["g"], endTime=utc(now - 5))
    assert server.call("GET", f"{base}/q1?{expired}").status == 401
    future = permission(server, name, levels=["g"], startTime=utc(now + 3600))
    assert server.call("GET", f"{base}/q1?{future}").status == 401


def test_claims_of_none_or_unknown_levels_grant_nothing(server):
    name, keys = account(server)
    base = f"/api/v1/accounts/{name}/queues"
    et = utc(time.time() + 600)
    # the signature of the empty level set
    sig = hmac_sig(keys["primary"], f"{name}\n\nendTime:{et}")
    assert server.call("GET", f"{base}?auth=n&et={et}&sig={sig}").status == 403
    assert server.call("GET", f"{base}?auth=gx&et={et}&sig={sig}").status == 403


# -- the admin API -------------------------------------------------------------------------------


def test_the_admin_api_needs_the_admin_key(server):
    for headers in (
        {},
        {"Authorization": "Key wrong"},
        {"Authorization": f"Signed {server.admin_key}"},
    ):
        for method, path in (("GET", "/accounts"), ("POST", "/accounts"), ("POST", "/permissions")):
            r = server.call(method, "/admin/api/v1" + path, '"x"', headers)
            assert (r.status, shape(r)) == (401, UNAUTHORIZED), (method, path, headers)


def test_the_admin_api_manages_accounts_and_keys(server):
    name, keys = account(server)
    assert server.admin("POST", "/accounts", name).status == 409
    got = server.admin("GET", f"/accounts/{name}")
    assert got.status == 200 and got.json() == {"accountName": name, "keyNames": sorted(keys)}
    assert name in [a["accountName"] for a in server.admin("GET", "/accounts").json()]
    r = server.admin("POST", f"/accounts/{name}/keys", {"keyName": "extra"})
    assert r.status == 201 and isinstance(r.json(), str)
    extra = r.json()
    url = f"/api/v1/accounts/{name}/queues"
    assert server.call("GET", url, headers={"Authorization": f"Key {extra}"}).status == 200
    assert server.admin("POST", f"/accounts/{name}/keys", {"keyName": "extra"}).status == 409
    assert server.admin("DELETE", f"/accounts/{name}/keys/extra").status == 204
    time.sleep(5.2)  # the per-instance key cache
    assert server.call("GET", url, headers={"Authorization": f"Key {extra}"}).status == 401
    levels = server.admin("GET", "/permissions/supportedAuthorizationLevels").json()
    assert {"level": "ReadMessage", "shortForm": "r"} in levels
    missing = server.admin("GET", "/accounts/nobody-at-all")
    assert missing.status == 404 and missing.json()["account"] == "nobody-at-all"
    bad_key = server.admin(
        "POST", "/permissions", {"accountName": name, "keyName": "nope", "levels": ["g"]}
    )
    assert bad_key.status == 404 and bad_key.json()["operation"] == "GenerateQueryAuth"
    assert server.admin("POST", "/accounts", "bad!name").status == 400


def test_deleting_an_account_deletes_its_queues_and_only_its_own(server, queue_client):
    a, a_keys = account(server)
    b, b_keys = account(server)
    with_queue(server, a, a_keys["primary"], "same")
    with_queue(server, b, b_keys["primary"], "same")
    assert server.admin("DELETE", f"/accounts/{a}").status == 204
    names = {q.name for q in queue_client.list_queues()}
    assert f"{a}.same" not in names and f"{b}.same" in names
    assert server.admin("GET", f"/accounts/{a}").status == 404


def test_keys_are_sealed_at_rest(server, cassandra):
    """Reading the table gives no key: the stored value is neither the key nor its base64."""
    name, keys = account(server)
    rows = cassandra.session().execute(
        f"SELECT key_name, sealed FROM {server.keyspace}.service_account_keys WHERE account = %s",
        (name,),
    )
    stored = {r.key_name: bytes(r.sealed) for r in rows}
    assert set(stored) == {"primary", "secondary"}
    for key_name, sealed in stored.items():
        key = keys[key_name]
        raw = signing.key_bytes(key)
        assert key.encode() not in sealed and raw not in sealed
        assert len(sealed) == 1 + 12 + len(key) + 16  # version, nonce, ciphertext, tag
