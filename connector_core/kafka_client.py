"""Settings every cdcflow Kafka client shares: the kafka source and sink, the dead-letter sink, the
kafka checkpoint store and worker groups all talk to Kafka, so they build their clients here.

A pipeline says how to reach and authenticate to Kafka once, in one vocabulary: a ``kafka`` block
(:class:`KafkaClientConfig`) beside ``bootstrap_servers``. The worker engine's clients are
librdkafka (confluent-kafka); the spark engine reads Kafka with Spark's own connector, the Java
client. :meth:`KafkaClientConfig.librdkafka_settings` and :meth:`KafkaClientConfig.spark_options`
turn the one block into each client's names, so the same YAML runs on either engine.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from cdcflow.config import ResolvedPath
from cdcflow.errors import ConfigError

__all__ = ["LIBRDKAFKA_LOGGER", "KafkaClientConfig", "KafkaClientFileError"]

_SASL_PROTOCOLS = {"SASL_PLAINTEXT", "SASL_SSL"}
_SSL_PROTOCOLS = {"SSL", "SASL_SSL"}
# The JAAS login module Java's client needs for each mechanism cdcflow can fill in from a username
# and password; other mechanisms (GSSAPI, OAUTHBEARER) take theirs from the ``java`` passthrough.
_JAAS_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_LIBRDKAFKA_FILE_SETTINGS = {
    "ca": "ssl.ca.location",
    "certificate": "ssl.certificate.location",
    "key": "ssl.key.location",
}
Scalar = str | int | float | bool


class KafkaClientFileError(ConfigError):
    """A certificate or key file the ``kafka`` block names cannot be used."""


class KafkaClientConfig(BaseModel):
    """How a cdcflow Kafka client connects and authenticates: the ``kafka`` block of the kafka
    source, the kafka sink (and so a kafka dead-letter sink) and the kafka checkpoint store.

    Paths resolve against the pipeline file's folder; certificates and keys are PEM files (keys in
    PKCS#8, ``BEGIN PRIVATE KEY``, which both librdkafka and Java's client read). Secrets come from
    the environment: ``sasl_password: ${KAFKA_PASSWORD}``. ``librdkafka`` settings apply on the
    worker engine only and ``java`` settings on the spark engine only (Spark's Kafka connector);
    either overrides what cdcflow derived from the fields above.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"] | None = Field(
        default=None, description="with a SASL_* security_protocol"
    )
    sasl_username: str | None = Field(default=None, description="PLAIN and SCRAM mechanisms")
    sasl_password: SecretStr | None = Field(default=None, description="PLAIN and SCRAM mechanisms; use ${ENV}")
    ssl_ca_location: ResolvedPath | None = Field(
        default=None, description="PEM file of the CA certificates that signed the brokers' (default: the system's)"
    )
    ssl_certificate_location: ResolvedPath | None = Field(
        default=None, description="PEM file of this client's certificate (mutual TLS), with ssl_key_location"
    )
    ssl_key_location: ResolvedPath | None = Field(default=None, description="PEM file of this client's PKCS#8 key")
    ssl_key_password: SecretStr | None = Field(default=None, description="when the key file is encrypted")
    ssl_endpoint_identification: bool = Field(
        default=True, description="check that the broker's certificate names the host connected to"
    )
    client_id: str = Field(default="cdcflow", min_length=1)
    librdkafka: dict[str, Scalar] = Field(
        default_factory=dict, description="raw librdkafka settings (worker engine), e.g. {socket.timeout.ms: 30000}"
    )
    java: dict[str, str] = Field(
        default_factory=dict,
        description="raw Java client settings (spark engine's Kafka connector), without the kafka. prefix",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        sasl = self.security_protocol in _SASL_PROTOCOLS
        if sasl and self.sasl_mechanism is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs a sasl_mechanism")
        if not sasl and (self.sasl_mechanism or self.sasl_username or self.sasl_password):
            raise ValueError(
                f"sasl_* settings need security_protocol SASL_SSL or SASL_PLAINTEXT, not {self.security_protocol}"
            )
        if self.sasl_mechanism in _JAAS_LOGIN_MODULES and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs sasl_username and sasl_password")
        ssl_files = (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location, self.ssl_key_password)
        if self.security_protocol not in _SSL_PROTOCOLS and any(v is not None for v in ssl_files):
            raise ValueError(f"ssl_* settings need security_protocol SSL or SASL_SSL, not {self.security_protocol}")
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise ValueError("ssl_certificate_location and ssl_key_location go together (a client certificate)")
        return self

    # --- librdkafka (the worker engine) ---------------------------------------------------------

    def librdkafka_settings(self, bootstrap_servers: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """confluent-kafka settings for a client of ``bootstrap_servers``: this block's, then the
        role's ``extra`` (a producer's acks...), then the raw ``librdkafka`` passthrough."""
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
            # Errors only, through Python logging with repeats rate-limited: a broker that is down
            # makes librdkafka log every reconnect attempt.
            "log_level": 3,
            "logger": LIBRDKAFKA_LOGGER,
        }
        if self.sasl_mechanism is not None:
            settings["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            settings["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            settings["sasl.password"] = self.sasl_password.get_secret_value()
        if self.security_protocol in _SSL_PROTOCOLS:
            settings["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_endpoint_identification else "none"
            for name, path in self._ssl_files().items():
                settings[_LIBRDKAFKA_FILE_SETTINGS[name]] = str(path)
            if self.ssl_key_password is not None:
                settings["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return {**settings, **(extra or {}), **self.librdkafka}

    # --- Java (the spark engine's Kafka connector) ----------------------------------------------

    def spark_options(self, bootstrap_servers: str) -> dict[str, str]:
        """Spark ``kafka.*`` reader options for the same connection.

        Certificates and keys are read here, on the driver, and passed by value (Java's PEM
        settings), so executors on other hosts need no copy of the files.
        """
        java: dict[str, str] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism is not None:
            java["sasl.mechanism"] = self.sasl_mechanism
        module = _JAAS_LOGIN_MODULES.get(self.sasl_mechanism or "")
        if module is not None and self.sasl_username is not None and self.sasl_password is not None:
            java["sasl.jaas.config"] = (
                f'{module} required username="{_jaas_quoted(self.sasl_username)}" '
                f'password="{_jaas_quoted(self.sasl_password.get_secret_value())}";'
            )
        if self.security_protocol in _SSL_PROTOCOLS:
            java["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_endpoint_identification else ""
            files = self._ssl_files()
            if "ca" in files:
                java["ssl.truststore.type"] = "PEM"
                java["ssl.truststore.certificates"] = _read_pem(files["ca"], "ssl_ca_location")
            if "certificate" in files:
                java["ssl.keystore.type"] = "PEM"
                java["ssl.keystore.certificate.chain"] = _read_pem(files["certificate"], "ssl_certificate_location")
                key = _read_pem(files["key"], "ssl_key_location")
                if "BEGIN RSA PRIVATE KEY" in key or "BEGIN EC PRIVATE KEY" in key:
                    raise KafkaClientFileError(
                        f"kafka.ssl_key_location: {files['key']} is a PKCS#1/SEC1 key, which Java's Kafka client "
                        "cannot read; convert it to PKCS#8: openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pkcs8"
                    )
                java["ssl.keystore.key"] = key
            if self.ssl_key_password is not None:
                java["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        java.update(self.java)
        return {f"kafka.{name}": value for name, value in java.items()}

    def _ssl_files(self) -> dict[str, Path]:
        files = {
            "ca": (self.ssl_ca_location, "ssl_ca_location"),
            "certificate": (self.ssl_certificate_location, "ssl_certificate_location"),
            "key": (self.ssl_key_location, "ssl_key_location"),
        }
        found = {}
        for name, (path, field) in files.items():
            if path is None:
                continue
            if not path.is_file():
                raise KafkaClientFileError(f"kafka.{field}: {path} is not a readable file")
            found[name] = path
        return found


def _jaas_quoted(value: str) -> str:
    """A JAAS option value inside double quotes: backslash and quote are escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _read_pem(path: Path, field: str) -> str:
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaClientFileError(f"kafka.{field}: cannot read {path}: {exc}") from exc
    if "-----BEGIN " not in text:
        raise KafkaClientFileError(f"kafka.{field}: {path} is not a PEM file")
    return text


class _RepeatsRateLimited(logging.Filter):
    """Lets the first of a kind of log line through, then at most one per ``interval_s``, saying
    how many like it were held back. librdkafka logs each failed reconnect to a broker that is down
    (thousands of lines in minutes); the first line says it all."""

    _VARYING = re.compile(r"^\[thrd:[^\]]*\]: |\d+(?=ms\b)|\d+(?= identical)")

    def __init__(self, interval_s: float, max_kinds: int = 1000) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.max_kinds = max_kinds
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (last let through at, held back since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = self._VARYING.sub("", str(record.msg) % record.args if record.args else str(record.msg))
        now = time.monotonic()
        with self._lock:
            last = self._kinds.get(kind)
            if last is not None and now - last[0] < self.interval_s:
                self._kinds[kind] = (last[0], last[1] + 1)
                return False
            if len(self._kinds) >= self.max_kinds:
                self._kinds.clear()
            self._kinds[kind] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} (%d more like it in the last %.0f s)"
            record.args = (*(record.args if isinstance(record.args, tuple) else ()), last[1], now - last[0])
        return True


LIBRDKAFKA_LOGGER = logging.getLogger("cdcflow.librdkafka")
"""Where every cdcflow Kafka client's librdkafka log lines go, repeats rate-limited."""
LIBRDKAFKA_LOGGER.addFilter(_RepeatsRateLimited(interval_s=60.0))
