"""TLS on the listener (``--tls-cert-file``, ``--tls-key-file``): a self-signed certificate
for 127.0.0.1 made by the test; a client that trusts it and verifies it (certificate chain and
host name) talks v1 over HTTPS; a client that does not trust it, a client that checks a
different host name, and plain HTTP get no answer from the application."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import ssl
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from support.service_harness import LOOPBACK, free_port, request, start_test_server


def self_signed(tmp_path) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cassieq test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_https_with_a_verified_self_signed_certificate(
    cassandra, queue_client, cassieq_options, tmp_path
):
    cert, key_file = self_signed(tmp_path)
    trusting = ssl.create_default_context(cafile=cert)  # verifies chain and host name
    server = start_test_server(
        tmp_path / "server",
        cassandra,
        cassieq_options,
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key_file,
        port=free_port(),
        tls=trusting,
    )
    try:
        assert server.call("GET", "/ready").json()["status"] == "ready"
        account = f"tls-{uuid.uuid4().hex[:8]}"
        key = server.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}"}
        base = f"/api/v1/accounts/{account}/queues"
        assert server.call("POST", base, '{"queueName":"q"}', auth).status == 201
        assert server.call("POST", base + "/q/messages", "over tls", auth).status == 201
        got = server.call("GET", base + "/q/messages/next", headers=auth)
        assert got.status == 200 and got.json()["message"] == "over tls"

        # a client that does not trust the certificate refuses it
        with pytest.raises(ssl.SSLCertVerificationError, match="self-signed|self signed"):
            request(server.port, "GET", "/ready", tls=ssl.create_default_context())
        # the certificate names 127.0.0.1 only: another host name is refused
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|match"):
            request(server.port, "GET", "/ready", tls=trusting, host="localhost")
        # plain HTTP on the TLS port gets no HTTP answer
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            request(server.port, "GET", "/ready", timeout=10)
        assert server.call("GET", "/health").status == 200  # still serving
    finally:
        server.stop()
