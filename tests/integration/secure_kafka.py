"""A second real broker for the security and shutdown tests (scripts/kafka_secure.sh): a SASL_SSL
listener (SCRAM over TLS, client certificates required) whose certificates the tests create here,
and a PLAINTEXT listener that the shutdown tests may freeze without disturbing the shared broker."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.integration.conftest import REPO

SCRIPT = REPO / "scripts" / "kafka_secure.sh"
DATA = Path(
    os.environ.get("CDCFLOW_DATA", Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow")) / "run")
)
FOLDER = DATA / "kafka-secure"
USERNAME = "cdcflow"
PASSWORD = 'p@ss "word" \\ 42'  # quotes and a backslash: the JAAS config Spark gets must escape them
KEY_PASSWORD = "key-secret"


@dataclass(frozen=True)
class SecureKafka:
    plaintext: str
    sasl_ssl: str
    tls: Path

    @property
    def pid(self) -> int:
        return int((FOLDER / "kafka.pid").read_text())

    def client_block(self, mechanism: str = "SCRAM-SHA-512", encrypted_key: bool = False) -> str:
        """The ``kafka`` block (YAML flow style) of a client of the SASL_SSL listener; the
        password comes from ${KAFKA_PASSWORD}, as a secret should."""
        key = "client-encrypted.key" if encrypted_key else "client.key"
        block = (
            f"{{security_protocol: SASL_SSL, sasl_mechanism: {mechanism}, sasl_username: {USERNAME}, "
            f"sasl_password: '${{KAFKA_PASSWORD}}', ssl_ca_location: '{self.tls / 'ca.pem'}', "
            f"ssl_certificate_location: '{self.tls / 'client.pem'}', ssl_key_location: '{self.tls / key}'"
        )
        if encrypted_key:
            block += f", ssl_key_password: '{KEY_PASSWORD}'"
        return block + "}"

    def librdkafka(self) -> dict[str, str]:
        """The same client as plain librdkafka settings, for the tests' own readers."""
        return {
            "bootstrap.servers": self.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USERNAME,
            "sasl.password": PASSWORD,
            "ssl.ca.location": str(self.tls / "ca.pem"),
            "ssl.certificate.location": str(self.tls / "client.pem"),
            "ssl.key.location": str(self.tls / "client.key"),
        }


def _script(action: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), action],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {})},
    )


def ensure_secure_kafka() -> SecureKafka:
    """The running secure broker, or a fresh one with new certificates."""
    tls = FOLDER / "tls"
    broker = SecureKafka("127.0.0.1:19092", "127.0.0.1:19094", tls)
    if _script("status").returncode == 0 and (tls / "client-encrypted.key").exists():
        return broker
    _script("stop")
    make_certificates(tls)
    users = ";".join(f"{m}=[name={USERNAME},password={PASSWORD}]" for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"))
    started = _script("start", {"KAFKA_TLS_DIR": str(tls), "KAFKA_SCRAM_USERS": users})
    if started.returncode != 0:
        raise RuntimeError(f"{SCRIPT} start failed:\n{started.stdout}\n{started.stderr}")
    return broker


def make_certificates(folder: Path) -> None:
    """A CA, the broker's certificate for 127.0.0.1 and localhost, and a client certificate:
    ca.pem, broker.pem (key + chain, as the broker's PEM keystore wants), client.pem, client.key
    (PKCS#8) and client-encrypted.key (the same key, encrypted with KEY_PASSWORD)."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cdcflow test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(name: str, usage: list[x509.ObjectIdentifier], sans: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        if name == "cdcflow-client":
            encrypted = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
            )
            (folder / "client-encrypted.key").write_bytes(encrypted)
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    broker_cert, broker_key = leaf(
        "127.0.0.1",
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    client_cert, client_key = leaf("cdcflow-client", [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    (folder / "ca.pem").write_bytes(ca_pem)
    (folder / "broker.pem").write_bytes(broker_key + broker_cert + ca_pem)
    (folder / "client.pem").write_bytes(client_cert)
    (folder / "client.key").write_bytes(client_key)
