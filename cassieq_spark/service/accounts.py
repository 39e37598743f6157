"""Accounts and their keys, in Cassandra, each key sealed under a server-side secret.

Signing needs the key itself (an HMAC key), so keys cannot be stored hashed. Each is stored
AES-256-GCM-sealed under a key derived from the service secret by scrypt (a memory-hard
key-derivation function: a dump of the table gives an offline guesser of the secret one try
per scrypt, not per hash), and the secret must have at least :data:`MIN_SECRET_BYTES` bytes.
The secret lives in a file or an environment variable, never in Cassandra: whoever can read
the tables holds no usable key. The associated data binds a sealed key to its account and key
name, so a sealed value copied to another account's row does not open there. A key sealed the
earlier way (a SHA-256 of the secret, seal version 1) still opens, and is sealed again the new
way the first time it is read.

Accounts are cached per instance for :data:`CACHE_SECONDS`; a key deleted on one instance
stops working on every other within that time. Names that are no account are cached too, in
a bounded cache of their own (:data:`MAX_UNKNOWN`, oldest out first), so a stream of made-up
names costs one Cassandra read per name and 5 s, and never pushes a real account out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from ..engine.store.session import Connection
from . import signing
from .config import MIN_SECRET_BYTES

log = logging.getLogger(__name__)

CACHE_SECONDS = 5.0
MAX_KNOWN = 10_000
MAX_UNKNOWN = 10_000
_SEAL_SHA256 = b"\x01"
_SEAL_SCRYPT = b"\x02"
# scrypt's cost: about 0.1 s and 16 MiB once per start; per guess for whoever holds a dump.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_SCRYPT_SALT = b"cassieq-service-keys/scrypt"
DEFAULT_KEY_NAMES = ("primary", "secondary")


class AccountExists(Exception):
    pass


class KeyExists(Exception):
    pass


class SecretError(ValueError):
    pass


class Sealer:
    """Seals and opens account keys under the service secret."""

    def __init__(self, secret: bytes):
        if len(secret) < MIN_SECRET_BYTES:
            raise SecretError(
                f"the service secret has {len(secret)} bytes; it needs at least "
                f"{MIN_SECRET_BYTES} (make one with: head -c 32 /dev/urandom | base64 > FILE)"
            )
        derived = Scrypt(salt=_SCRYPT_SALT, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
        self._aead = AESGCM(derived.derive(secret))
        self._legacy = AESGCM(hashlib.sha256(b"cassieq-service-keys\n" + secret).digest())

    def seal(self, account: str, key_name: str, key: str) -> bytes:
        nonce = os.urandom(12)
        aad = f"{account}\n{key_name}".encode()
        return _SEAL_SCRYPT + nonce + self._aead.encrypt(nonce, key.encode("ascii"), aad)

    @staticmethod
    def outdated(sealed: bytes) -> bool:
        """Sealed the earlier way (under a SHA-256 of the secret): to be sealed again."""
        return sealed[:1] == _SEAL_SHA256

    def open(self, account: str, key_name: str, sealed: bytes) -> str | None:
        """The key, or None when it was sealed under another secret or for another row."""
        if not sealed or len(sealed) < 13 + 16:
            return None
        aead = {_SEAL_SCRYPT: self._aead, _SEAL_SHA256: self._legacy}.get(sealed[:1])
        if aead is None:
            return None
        aad = f"{account}\n{key_name}".encode()
        try:
            return aead.decrypt(sealed[1:13], sealed[13:], aad).decode("ascii")
        except (InvalidTag, UnicodeDecodeError):
            return None


@dataclass(frozen=True)
class Account:
    name: str
    keys: dict[str, str]

    def as_dict(self) -> dict:
        """The account with its keys in clear: only for the answer that creates them."""
        return {"accountName": self.name, "keys": dict(self.keys)}

    def listed(self) -> dict:
        """The account as listed: its key names, never the keys (shown once, when made)."""
        return {"accountName": self.name, "keyNames": sorted(self.keys)}


class AccountStore:
    """Accounts of one keyspace. Thread-safe."""

    def __init__(self, conn: Connection, sealer: Sealer):
        self.conn = conn
        self.sealer = sealer
        # name -> (when read, account); oldest first, each bounded on its own
        self._known: OrderedDict[str, tuple[float, Account]] = OrderedDict()
        self._unknown: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self.on_read: Callable[[], object] = lambda: None  # an account read from Cassandra

    def cached(self, name: str) -> tuple[bool, Account | None]:
        """``(True, account)`` when :meth:`get` would answer from its cache (no Cassandra read,
        so callable on the event loop; ``account`` None: no such account), else
        ``(False, None)``."""
        now = time.monotonic()
        with self._lock:
            hit = self._known.get(name)
            if hit is not None and now - hit[0] < CACHE_SECONDS:
                return True, hit[1]
            missed = self._unknown.get(name)
            if missed is not None and now - missed < CACHE_SECONDS:
                return True, None
        return False, None

    def get(self, name: str, *, fresh: bool = False) -> Account | None:
        if not fresh:
            hit, account = self.cached(name)
            if hit:
                return account
        now = time.monotonic()
        account = self._read(name)
        self.on_read()
        with self._lock:
            self._known.pop(name, None)
            self._unknown.pop(name, None)
            if account is None:
                self._unknown[name] = now
                while len(self._unknown) > MAX_UNKNOWN:
                    self._unknown.popitem(last=False)
            else:
                self._known[name] = (now, account)
                while len(self._known) > MAX_KNOWN:
                    self._known.popitem(last=False)
        return account

    def _read(self, name: str) -> Account | None:
        row = self.conn.execute(
            "SELECT account FROM {ks}.service_accounts WHERE account = ?", (name,)
        ).one()
        if row is None:
            return None
        keys: dict[str, str] = {}
        for r in self.conn.execute(
            "SELECT key_name, sealed FROM {ks}.service_account_keys WHERE account = ?", (name,)
        ):
            key = self.sealer.open(name, r.key_name, r.sealed)
            if key is None:
                log.warning(
                    "account %s: key %r does not open under this service secret; it is ignored "
                    "(was the secret changed?)",
                    name,
                    r.key_name,
                )
                continue
            if self.sealer.outdated(r.sealed):
                self._seal_again(name, r.key_name, r.sealed, key)
            keys[r.key_name] = key
        return Account(name, keys)

    def _seal_again(self, account: str, key_name: str, old: bytes, key: str) -> None:
        """Seal ``key`` the current way, only while its row still holds ``old``: a key deleted
        meanwhile stays deleted."""
        self.conn.cas(
            "UPDATE {ks}.service_account_keys SET sealed = ? "
            "WHERE account = ? AND key_name = ? IF sealed = ?",
            (self.sealer.seal(account, key_name, key), account, key_name, old),
            read="SELECT sealed FROM {ks}.service_account_keys WHERE account = ? AND key_name = ?",
            read_params=(account, key_name),
            applied=lambda row: row is not None and not self.sealer.outdated(row.sealed),
        )
        log.info(
            "account %s: key %r sealed again under the current key derivation", account, key_name
        )

    def forget(self, name: str) -> None:
        with self._lock:
            self._known.pop(name, None)
            self._unknown.pop(name, None)

    def list(self) -> list[Account]:
        names = sorted(
            r.account for r in self.conn.execute("SELECT account FROM {ks}.service_accounts")
        )
        return [a for a in (self.get(n, fresh=True) for n in names) if a is not None]

    def create(self, name: str) -> Account:
        res = self.conn.cas(
            "INSERT INTO {ks}.service_accounts (account, created_at) "
            "VALUES (?, toTimestamp(now())) IF NOT EXISTS",
            (name,),
            read="SELECT account FROM {ks}.service_accounts WHERE account = ?",
            read_params=(name,),
            applied=lambda row: False,  # a lost reply: take it as taken, the caller may retry
        )
        if not res.was_applied:
            raise AccountExists(name)
        for key_name in DEFAULT_KEY_NAMES:
            self._write_key(name, key_name, signing.new_key())
        self.forget(name)
        account = self.get(name, fresh=True)
        assert account is not None
        return account

    def _write_key(self, account: str, key_name: str, key: str) -> None:
        self.conn.execute(
            "INSERT INTO {ks}.service_account_keys (account, key_name, sealed, created_at) "
            "VALUES (?, ?, ?, toTimestamp(now()))",
            (account, key_name, self.sealer.seal(account, key_name, key)),
        )

    def add_key(self, account: str, key_name: str) -> str:
        key = signing.new_key()
        res = self.conn.cas(
            "INSERT INTO {ks}.service_account_keys (account, key_name, sealed, created_at) "
            "VALUES (?, ?, ?, toTimestamp(now())) IF NOT EXISTS",
            (account, key_name, self.sealer.seal(account, key_name, key)),
            read="SELECT sealed FROM {ks}.service_account_keys WHERE account = ? AND key_name = ?",
            read_params=(account, key_name),
            applied=lambda row: (
                row is not None and self.sealer.open(account, key_name, row.sealed) == key
            ),
        )
        if not res.was_applied:
            raise KeyExists(key_name)
        self.forget(account)
        return key

    def delete_key(self, account: str, key_name: str) -> None:
        self.conn.execute(
            "DELETE FROM {ks}.service_account_keys WHERE account = ? AND key_name = ?",
            (account, key_name),
        )
        self.forget(account)

    def delete_keys(self, name: str) -> None:
        """The first step of deleting an account: no request opens it from now on (on other
        instances once their cache of it ends, :data:`CACHE_SECONDS`)."""
        self.conn.execute("DELETE FROM {ks}.service_account_keys WHERE account = ?", (name,))
        self.forget(name)

    def delete(self, name: str) -> None:
        """The last step: the account row, once its keys and queues are gone."""
        self.conn.execute("DELETE FROM {ks}.service_account_keys WHERE account = ?", (name,))
        self.conn.execute("DELETE FROM {ks}.service_accounts WHERE account = ?", (name,))
        self.forget(name)

    def exists(self, name: str) -> bool:
        row = self.conn.execute(
            "SELECT account FROM {ks}.service_accounts WHERE account = ?", (name,)
        ).one()
        return row is not None
