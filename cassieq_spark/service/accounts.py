"""Accounts and their keys, in Cassandra, each key sealed under a server-side secret.

Signing needs the key itself (an HMAC key), so keys cannot be stored hashed. Each is stored
AES-256-GCM-sealed under a key derived from the service secret, which lives in a file or an
environment variable, never in Cassandra: whoever can read the tables holds no usable key. The
associated data binds a sealed key to its account and key name, so a sealed value copied to
another account's row does not open there.

Keys are cached per instance for :data:`CACHE_SECONDS`; a key deleted on one instance stops
working on every other within that time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..engine.store.session import Connection
from . import signing

log = logging.getLogger(__name__)

CACHE_SECONDS = 5.0
_SEAL_VERSION = b"\x01"
MIN_SECRET_BYTES = 16
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
        self._aead = AESGCM(hashlib.sha256(b"cassieq-service-keys\n" + secret).digest())

    def seal(self, account: str, key_name: str, key: str) -> bytes:
        nonce = os.urandom(12)
        aad = f"{account}\n{key_name}".encode()
        return _SEAL_VERSION + nonce + self._aead.encrypt(nonce, key.encode("ascii"), aad)

    def open(self, account: str, key_name: str, sealed: bytes) -> str | None:
        """The key, or None when it was sealed under another secret or for another row."""
        if not sealed or sealed[:1] != _SEAL_VERSION or len(sealed) < 13 + 16:
            return None
        aad = f"{account}\n{key_name}".encode()
        try:
            return self._aead.decrypt(sealed[1:13], sealed[13:], aad).decode("ascii")
        except (InvalidTag, UnicodeDecodeError):
            return None


@dataclass(frozen=True)
class Account:
    name: str
    keys: dict[str, str]

    def as_dict(self) -> dict:
        return {"accountName": self.name, "keys": dict(self.keys)}


class AccountStore:
    """Accounts of one keyspace. Thread-safe."""

    def __init__(self, conn: Connection, sealer: Sealer):
        self.conn = conn
        self.sealer = sealer
        self._cache: dict[str, tuple[float, Account | None]] = {}
        self._lock = threading.Lock()

    def cached(self, name: str) -> tuple[bool, Account | None]:
        """``(True, account)`` when :meth:`get` would answer from its cache (no Cassandra read,
        so callable on the event loop), else ``(False, None)``."""
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and time.monotonic() - hit[0] < CACHE_SECONDS:
            return True, hit[1]
        return False, None

    def get(self, name: str, *, fresh: bool = False) -> Account | None:
        now = time.monotonic()
        if not fresh:
            with self._lock:
                hit = self._cache.get(name)
            if hit is not None and now - hit[0] < CACHE_SECONDS:
                return hit[1]
        account = self._read(name)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[name] = (now, account)
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
            keys[r.key_name] = key
        return Account(name, keys)

    def forget(self, name: str) -> None:
        with self._lock:
            self._cache.pop(name, None)

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

    def delete(self, name: str) -> None:
        self.conn.execute("DELETE FROM {ks}.service_account_keys WHERE account = ?", (name,))
        self.conn.execute("DELETE FROM {ks}.service_accounts WHERE account = ?", (name,))
        self.forget(name)
