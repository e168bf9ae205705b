"""The ``kafka`` block: what a file may say, and the names each engine's client gets for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigFieldError
from cdcflow.kafka_client import KafkaClientConfig, KafkaClientFileError
from cdcflow.plugins import PluginRegistry


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.from_entry_points()


def pipeline(tmp_path: Path, kafka_block: str) -> Path:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\n"
        "source: {type: datagen, count: 1}\n"
        "sink:\n"
        "  type: kafka\n"
        "  bootstrap_servers: b:9093\n"
        f"  kafka: {kafka_block}\n"
    )
    return file


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("{security_protocol: SASL_SSL}", "needs a sasl_mechanism"),
        ("{security_protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, sasl_username: u}", "needs sasl_username and"),
        ("{sasl_mechanism: PLAIN, sasl_username: u, sasl_password: p}", "need security_protocol SASL_SSL"),
        ("{ssl_ca_location: ca.pem}", "ssl_* settings need security_protocol SSL or SASL_SSL"),
        ("{security_protocol: SSL, ssl_key_location: k.pem}", "go together"),
        ("{security_protocol: TLS}", "'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'"),
        ("{security_protocol: SSL, sslca: x}", "one of the known fields (client_id, java, librdkafka"),
    ],
)
def test_inconsistent_blocks_are_field_errors_with_the_line(
    tmp_path: Path, registry: PluginRegistry, block: str, expected: str
) -> None:
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(pipeline(tmp_path, block), registry)
    assert "line 6: field sink.kafka" in str(caught.value)
    assert expected in str(caught.value)


def test_one_block_in_both_vocabularies(tmp_path: Path, registry: PluginRegistry) -> None:
    for name, text in (("ca.pem", "CA"), ("client.pem", "CERT"), ("client.key", "KEY")):
        (tmp_path / name).write_text(f"-----BEGIN {text}-----\nx\n-----END {text}-----\n")
    file = pipeline(
        tmp_path,
        "{security_protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-256, sasl_username: 'me', "
        "sasl_password: '${PW}', ssl_ca_location: ca.pem, ssl_certificate_location: client.pem, "
        "ssl_key_location: client.key, ssl_endpoint_identification: false, librdkafka: {socket.timeout.ms: 5000}, "
        "java: {request.timeout.ms: '5000'}}",
    )
    spec = load_pipeline(file, registry, environ={"PW": 'a"b\\c'})
    client: KafkaClientConfig = spec.sink.config.kafka  # type: ignore[attr-defined]
    assert 'a"b' not in repr(client)  # a secret is not printed

    librdkafka = client.librdkafka_settings("b:9093", {"acks": "all"})
    assert {k: v for k, v in librdkafka.items() if k not in ("logger", "log_level")} == {
        "bootstrap.servers": "b:9093",
        "client.id": "cdcflow",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "me",
        "sasl.password": 'a"b\\c',
        "ssl.endpoint.identification.algorithm": "none",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.certificate.location": str(tmp_path / "client.pem"),
        "ssl.key.location": str(tmp_path / "client.key"),
        "acks": "all",
        "socket.timeout.ms": 5000,
    }

    spark = client.spark_options("b:9093")
    assert spark == {
        "kafka.bootstrap.servers": "b:9093",
        "kafka.client.id": "cdcflow",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="me" password="a\\"b\\\\c";',
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": (tmp_path / "ca.pem").read_text(),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": (tmp_path / "client.pem").read_text(),
        "kafka.ssl.keystore.key": (tmp_path / "client.key").read_text(),
        "kafka.request.timeout.ms": "5000",
    }


def test_missing_and_pkcs1_key_files_name_the_setting(tmp_path: Path) -> None:
    client = KafkaClientConfig(security_protocol="SSL", ssl_ca_location=tmp_path / "nope.pem")
    with pytest.raises(KafkaClientFileError, match=r"kafka.ssl_ca_location: .*nope.pem is not a readable file"):
        client.librdkafka_settings("b:1")
    (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "k.pem").write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    client = KafkaClientConfig(
        security_protocol="SSL", ssl_certificate_location=tmp_path / "c.pem", ssl_key_location=tmp_path / "k.pem"
    )
    with pytest.raises(KafkaClientFileError, match=r"kafka.ssl_key_location: .* convert it to PKCS#8"):
        client.spark_options("b:1")
