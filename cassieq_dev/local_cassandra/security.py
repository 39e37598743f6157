"""Password authentication and TLS for a local node: the yaml it needs and its certificates.

Everything is generated locally with ``openssl`` and the JDK's ``keytool`` (no download): a CA,
one node certificate valid for 127.0.0.1-127.0.0.3 and localhost, and a client certificate for
mutual TLS. They live in ``<base_dir>/tls`` and are kept across restarts, so clients that
trust ``ca.pem`` keep working. The superuser is Cassandra's default ``cassandra``/``cassandra``:
this is a local test node, never a production setup.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .config import CassandraError

SUPERUSER = ("cassandra", "cassandra")
# Protects the node's keystores on disk; the files are local test material (see module doc).
STORE_PASSWORD = "cassieq-local"
TLS_MODES = (None, "on", "mutual")
NODE_NAMES = ("IP:127.0.0.1", "IP:127.0.0.2", "IP:127.0.0.3", "DNS:localhost")

OPEN_AUTH = "authenticator: AllowAllAuthenticator\nauthorizer: AllowAllAuthorizer"
PASSWORD_AUTH = """\
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
# No caches: a role or grant made by a test applies to its next request.
roles_validity: 0ms
permissions_validity: 0ms
credentials_validity: 0ms"""


@dataclass(frozen=True)
class TlsFiles:
    """The TLS material of a local node or cluster (paths under ``<base_dir>/tls``)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    @property
    def keystore(self) -> Path:
        return self.directory / "node.p12"

    @property
    def truststore(self) -> Path:
        return self.directory / "truststore.p12"


def check_tls_mode(tls: object) -> str | None:
    if tls is True:
        return "on"
    if tls in (False, None, "", "0"):
        return None
    if tls in ("1", "on", "mutual"):
        return "mutual" if tls == "mutual" else "on"
    raise ValueError(f"tls must be False, True, 'on' or 'mutual', got {tls!r}")


def auth_yaml(auth: bool) -> str:
    return PASSWORD_AUTH if auth else OPEN_AUTH


def tls_yaml(tls: str | None, files: TlsFiles) -> str:
    """``client_encryption_options``: TLS required on the CQL port (no plaintext clients)."""
    if tls is None:
        return "client_encryption_options:\n  enabled: false"
    lines = [
        "client_encryption_options:",
        "  enabled: true",
        "  optional: false",
        f"  keystore: {files.keystore.as_posix()}",
        f"  keystore_password: {STORE_PASSWORD}",
        "  store_type: PKCS12",
        f"  require_client_auth: {'true' if tls == 'mutual' else 'false'}",
    ]
    if tls == "mutual":
        lines += [
            f"  truststore: {files.truststore.as_posix()}",
            f"  truststore_password: {STORE_PASSWORD}",
        ]
    return "\n".join(lines)


def _run(*args: str | Path, cwd: Path) -> None:
    tool = str(args[0])
    if shutil.which(tool) is None:
        raise CassandraError(f"`{tool}` is needed to make TLS certificates: install it")
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CassandraError(
            f"making TLS certificates in {cwd} failed at `{tool}`", proc.stderr[-2000:]
        )


def _signed(directory: Path, name: str, subject: str, extensions: str) -> None:
    """``name.key`` and ``name.pem``, signed by the CA in ``directory``."""
    ext = directory / f"{name}.ext"
    ext.write_text(extensions + "\n")
    _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
         "-out", f"{name}.csr", "-subj", subject, cwd=directory)  # fmt: skip
    _run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", f"{name}.pem", "-days", "3650", "-sha256",
         "-extfile", ext.name, cwd=directory)  # fmt: skip


def ensure_tls_files(directory: Path, node_names: tuple[str, ...] = NODE_NAMES) -> TlsFiles:
    """Make the CA, node and client certificates once; later calls reuse them. ``node_names``:
    the subjectAltName entries of the node certificate (tests give it a wrong one)."""
    files = TlsFiles(directory)
    if files.keystore.exists() and files.truststore.exists() and files.client_key.exists():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
         "-out", "ca.pem", "-days", "3650", "-sha256", "-subj", "/CN=cassieq local CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    _signed(directory, "node", "/CN=127.0.0.1", f"subjectAltName={','.join(node_names)}")
    _signed(directory, "client", "/CN=cassieq-client", "extendedKeyUsage=clientAuth")
    _run("openssl", "pkcs12", "-export", "-in", "node.pem", "-inkey", "node.key",
         "-certfile", "ca.pem", "-name", "node", "-out", "node.p12",
         "-passout", f"pass:{STORE_PASSWORD}", cwd=directory)  # fmt: skip
    _run("keytool", "-importcert", "-noprompt", "-alias", "cassieq-ca", "-file", "ca.pem",
         "-keystore", "truststore.p12", "-storetype", "PKCS12",
         "-storepass", STORE_PASSWORD, cwd=directory)  # fmt: skip
    for path in directory.iterdir():
        path.chmod(0o600 if path.suffix in (".key", ".p12") else 0o644)
    return files
