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

from cdcflow._config_fields import ResolvedPath
from cdcflow.errors import ConfigError, StartupCheckError

__all__ = ["LIBRDKAFKA_LOGGER", "TOMBSTONE_HEADER", "KafkaClientConfig", "KafkaClientFileError"]

TOMBSTONE_HEADER = "cdcflow.tombstone"
"""Marks the tombstone the kafka sink writes after a delete (``tombstones_on_delete``), so a reader of
cdcflow's topics (the kafka source) can tell it from a delete of its own: an unwrapped delete is a
null value too."""

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

    # --- start-up -------------------------------------------------------------------------------

    def check_reachable(self, bootstrap_servers: str, timeout_s: float, where: str) -> None:
        """Return once a broker of ``bootstrap_servers`` answered a metadata request with this
        block's security settings; else raise :class:`StartupCheckError` naming the setting (under
        ``where``, e.g. ``sink``) and the address. Refused credentials or certificates fail at once;
        a broker that cannot be reached yet is waited for up to ``timeout_s``."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient

        errors: list[KafkaError] = []
        connection_log = _ConnectionLog()
        admin = AdminClient(
            self.librdkafka_settings(bootstrap_servers, {"error_cb": errors.append}) | connection_log.settings()
        )
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                # A metadata request for no topic (what describe_cluster sends): list_topics()
                # asks for every topic, 0.04 s of CPU at start-up against a broker holding 4,000.
                admin.describe_cluster(request_timeout=max(0.2, min(1.0, remaining))).result()
                return
            except KafkaException as exc:
                errors.append(exc.args[0])
            admin.poll(0)  # serves error_cb
            seen: list[Any] = [*errors, *connection_log.failures()]
            for error in seen:
                refusal = _refusal(error)
                if refusal is not None:
                    settings, what = refusal
                    raise StartupCheckError(
                        f"{' / '.join(f'{where}.kafka.{s}' for s in settings)}: {what.format(bootstrap_servers)}: "
                        f"{_readable(error.str())}"
                    )
            if remaining <= 1.0:
                # The most telling error: one that says why (not a transport failure, not the
                # request's own timeout), else why a connection failed, else any.
                vague = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
                causes = [e for e in errors if e.code() not in vague]
                transport = [e for e in errors if e.code() == KafkaError._TRANSPORT]
                other = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
                cause = (causes or transport or other or errors)[-1]
                raise StartupCheckError(
                    f"{where}.bootstrap_servers: no Kafka broker at {bootstrap_servers} answered within "
                    f"{timeout_s:.3g} s (engine.startup_timeout_s): {_readable(cause.str())}"
                )

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


class _ConnectionFailure:
    """A connection failure librdkafka only logs (at info level), shaped like a KafkaError."""

    def __init__(self, text: str) -> None:
        self.text = text

    def code(self) -> int:
        return 0

    def str(self) -> str:
        return self.text


class _ConnectionLog:
    """librdkafka's connection log during a start-up check: a client speaking the wrong security
    protocol is disconnected while asking for API versions, which librdkafka reports only there.
    Warnings and errors still go to :data:`LIBRDKAFKA_LOGGER`."""

    def __init__(self) -> None:
        self._failures: list[str] = []

    def settings(self) -> dict[str, Any]:
        return {"logger": self, "log_level": 6}

    def log(self, level: int, message: str, *args: Any) -> None:
        if level >= logging.WARNING:
            LIBRDKAFKA_LOGGER.log(level, message, *args)
        text = str(args[-1]) if args else message
        if "Disconnected" in text and "state APIVERSION_QUERY" in text:
            self._failures.append(text)

    def failures(self) -> list[_ConnectionFailure]:
        return [_ConnectionFailure(f"{text} (a plaintext client at a TLS listener?)") for text in self._failures[:1]]


def _refusal(error: Any) -> tuple[tuple[str, ...], str] | None:
    """For an error no wait will cure: the ``kafka`` settings to fix and what happened (``{}`` is
    the address); None for a broker not reached (yet)."""
    from confluent_kafka import KafkaError

    code, text = error.code(), error.str()
    protocol = ("security_protocol",), "the Kafka broker at {} speaks another security protocol"
    wrong_protocol = ("state APIVERSION_QUERY", "wrong version number", "packet length too long", "PLAINTEXT broker")
    if any(sign in text for sign in wrong_protocol):
        return protocol
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return ("sasl_username", "sasl_password"), "the Kafka broker at {} refused the credentials"
    if code == KafkaError._SSL:
        return ("ssl_ca_location",), "the certificate of the Kafka broker at {} is not trusted"
    if "alert bad certificate" in text or "alert certificate required" in text or "alert unknown ca" in text:
        client_certificate = ("ssl_certificate_location", "ssl_key_location")
        return client_certificate, "the Kafka broker at {} refused this client's certificate"
    if "might be caused by incorrect security.protocol" in text:
        return protocol
    return None


_BROKER_PREFIX = re.compile(r"^(?:\[thrd:[^\]]*\]: )?\S+/(?:bootstrap|\d+): ")
_STATE_SUFFIX = re.compile(r" \(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)")


def _readable(message: str) -> str:
    """A librdkafka error without the broker-handle prefix and connection-state suffix."""
    return _STATE_SUFFIX.sub("", _BROKER_PREFIX.sub("", message))


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
