"""``cassieq account create|list|delete``: the HTTP service's accounts, through its admin API.

Through the admin API of a running ``cassieq serve`` (``--service``, with its admin key), not
with the service secret against Cassandra: the secret unseals every account's keys, so it stays
with the service instead of being copied to each operator's machine; the service is the one
place keys are made and sealed, and logs each call; and the command needs neither Cassandra's
address nor the ``[server]`` extra (only the standard library's HTTP client), so it works from
any machine that can reach the service. The cost, a running service, is no cost where its keys
are used.

``create`` prints the new keys once (the admin API shows them only in its reply to the create)
as a shell script: the keys as comments and ``KEY=``, then ready ``curl`` commands that create a
queue, put a message, receive it (``next``) and ack it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import CassieQError, ConfigError

DEFAULT_SERVICE = "http://127.0.0.1:8080"
# What `make serve` writes: the admin key of the service it starts, read when nothing else names one.
SERVE_ADMIN_KEY_FILE = Path(".serve") / "admin-key"
ADMIN_PREFIX = "/admin/api/v1"


class AdminApiError(CassieQError):
    """The service refused an admin call or could not be reached; the message says what to do."""


def add_account_parser(sub: argparse._SubParsersAction) -> None:
    """The ``account`` command and its ``create``, ``list`` and ``delete`` subcommands."""
    s = sub.add_parser(
        "account",
        help="accounts of the HTTP service (cassieq serve), through its admin API",
        description="Accounts of a running `cassieq serve`, through its admin API. The service: "
        f"--service, else CASSIEQ_SERVICE_URL, else {DEFAULT_SERVICE}. The admin key: "
        "--admin-key-file, else CASSIEQ_ADMIN_KEY_FILE or CASSIEQ_ADMIN_KEY, else "
        f"{SERVE_ADMIN_KEY_FILE} (what `make serve` writes).",
    )
    actions = s.add_subparsers(dest="account_command", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="a new account: prints its keys (shown only now) and curl commands that use them",
    )
    create.add_argument("name", help="the account: 1-64 of letters, digits, '_', '-'")
    create.add_argument(
        "--queue", default="jobs", help="the queue the printed curl commands use (default jobs)"
    )
    create.add_argument(
        "--json", action="store_true", help="print the admin API's reply (JSON) instead"
    )
    actions.add_parser("list", help="the accounts and their key names (JSON; never the keys)")
    delete = actions.add_parser("delete", help="delete an account and its queues")
    delete.add_argument("name")
    delete.add_argument(
        "--yes", action="store_true", help="required: the account's queues and messages go too"
    )
    for p in (create, actions.choices["list"], delete):
        p.add_argument("--service", metavar="URL", help=f"the service (default {DEFAULT_SERVICE})")
        p.add_argument("--admin-key-file", metavar="FILE", help="a file holding the admin key")


def _service(args: argparse.Namespace) -> str:
    url = (args.service or os.environ.get("CASSIEQ_SERVICE_URL") or DEFAULT_SERVICE).rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--service {url!r} is not an http(s) URL, e.g. {DEFAULT_SERVICE}")
    return url


def _admin_key(args: argparse.Namespace) -> str:
    path = args.admin_key_file or os.environ.get("CASSIEQ_ADMIN_KEY_FILE")
    if path is None and os.environ.get("CASSIEQ_ADMIN_KEY"):
        return os.environ["CASSIEQ_ADMIN_KEY"].strip()
    if path is None and SERVE_ADMIN_KEY_FILE.is_file():
        path = str(SERVE_ADMIN_KEY_FILE)
    if path is None:
        raise ConfigError(
            "no admin key: give --admin-key-file (the file `cassieq serve --admin-key-file` "
            f"reads), or CASSIEQ_ADMIN_KEY_FILE, or run where `make serve` wrote {SERVE_ADMIN_KEY_FILE}"
        )
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"admin key file {path!r}: {exc.strerror or exc}") from None
    if not key:
        raise ConfigError(f"admin key file {path!r} is empty")
    return key


def admin_call(service: str, key: str, method: str, path: str, body: object = None) -> Any:
    """One admin API call; its JSON reply (None when empty). Raises AdminApiError."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        service + ADMIN_PREFIX + path,
        data=data,
        method=method,
        headers={"Authorization": f"Key {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            raw = reply.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:300]
        if exc.code == 401:
            raise AdminApiError(
                f"{service} refused the admin key (401): give the key its --admin-key-file "
                "holds, or start it with one"
            ) from None
        if exc.code == 404 and method == "DELETE":
            raise AdminApiError(
                f"no account {urllib.parse.unquote(path.rsplit('/', 1)[-1])!r} on {service}: "
                "`cassieq account list` shows them"
            ) from None
        raise AdminApiError(f"{method} {path} on {service}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AdminApiError(
            f"cannot reach the service at {service} ({reason}): start it (`make serve`, "
            "`cassieq serve`) or name it with --service"
        ) from None
    return json.loads(raw) if raw.strip() else None


def quick_start_script(service: str, account: str, keys: dict[str, str], queue: str) -> str:
    """A shell script: the keys as comments and KEY=, then put, next and ack with curl."""
    q = f"{service}/api/v1/accounts/{account}/queues"
    auth = '-H "Authorization: Key $KEY"'
    receipt = "python3 -c 'import json, sys; print(json.load(sys.stdin)[\"popReceipt\"])'"
    body = shlex.quote(json.dumps({"queueName": queue}))
    lines = [
        f"# account {account} on {service}: its keys are shown only now; keep them.",
        *(f"# {name} key: {value}" for name, value in keys.items()),
        "set -e",
        f"KEY={shlex.quote(keys['primary'])}",
        f"Q={q}",
        f'curl -sSf -X POST {auth} -d {body} "$Q"',
        f"curl -sSf -X POST {auth} --data 'hello' \"$Q/{queue}/messages\"",
        f'R=$(curl -sSf {auth} "$Q/{queue}/messages/next" | {receipt})',
        f'curl -sSf -X DELETE {auth} "$Q/{queue}/messages?popReceipt=$R"',
        f'echo "hello: put into {queue}, received and acked"',
    ]
    return "\n".join(lines) + "\n"


def run_account(args: argparse.Namespace) -> int:
    """Runs ``cassieq account ...``; the exit status."""
    if args.account_command == "create" and not re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", args.queue):
        raise ConfigError(
            f"--queue {args.queue!r}: a queue name is 1-200 of letters, digits, '_', '-', '.'"
        )
    service, key = _service(args), _admin_key(args)
    if args.account_command == "create":
        created = admin_call(service, key, "POST", "/accounts", {"accountName": args.name})
        if args.json:
            print(json.dumps(created))  # noqa: T201
        else:
            keys = dict(created["keys"])
            print(quick_start_script(service, created["accountName"], keys, args.queue), end="")  # noqa: T201
    elif args.account_command == "list":
        accounts = admin_call(service, key, "GET", "/accounts") or []
        shown = [
            # The service lists key names only; one that lists keys shows their names here.
            {
                "accountName": a["accountName"],
                "keyNames": sorted(a.get("keyNames") or a.get("keys") or ()),
            }
            for a in accounts
        ]
        print(json.dumps(shown))  # noqa: T201
    else:
        if not args.yes:
            raise ConfigError(
                f"deleting account {args.name!r} deletes its queues and their messages: "
                "add --yes to do it"
            )
        admin_call(service, key, "DELETE", f"/accounts/{urllib.parse.quote(args.name)}")
    return 0
