"""The avro converter on a registry as production runs one: Apicurio Registry over HTTPS only, with
basic authentication (a second instance of scripts/schema_registry.sh on its own port), through
confluent-kafka's client settings; the password comes from the environment in a pipeline file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdcflow.contract import PluginContext
from cdcflow.converters import AvroConverter, AvroConverterConfig
from cdcflow.errors import SchemaRegistryUnavailableError
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import read_topics, topics_with_prefix
from tests.integration.tikv_helpers import make_certificates

pytestmark = [pytest.mark.registry]

PASSWORD = "s3cret-registry"


@dataclass(frozen=True)
class SecureRegistry:
    url: str
    ca: Path


@pytest.fixture(scope="module")
def secure_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRegistry]:
    folder = tmp_path_factory.mktemp("registry-tls")
    make_certificates(folder)  # ca.pem, server.pem (127.0.0.1), server-key.pem
    port = os.environ.get("CDCFLOW_SECURE_REGISTRY_PORT", "18581")
    env = {
        **os.environ,
        "REGISTRY_PORT": port,
        "REGISTRY_TLS_DIR": str(folder),
        "REGISTRY_BASIC_AUTH": f"cdc:{PASSWORD}",
        "CDCFLOW_DATA": str(folder / "data"),  # its own pid file and storage
    }
    script = ["bash", str(REPO / "scripts" / "schema_registry.sh")]
    started = subprocess.run([*script, "start"], capture_output=True, text=True, timeout=300, check=False, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield SecureRegistry(f"https://127.0.0.1:{port}/apis/ccompat/v7", folder / "ca.pem")
    finally:
        subprocess.run([*script, "stop"], capture_output=True, timeout=120, check=False, env=env)


def _event(n: int) -> ChangeEvent:
    key = (Column("id", "int", False),)
    schema = RowSchema("c.ks.t", key, (*key, Column("note", "text")))
    return ChangeEvent(
        Op.CREATE, {"id": n}, None, {"id": n, "note": f"n{n}"}, SourceInfo("x", "c", "ks", "t", "p", {}, 1), 1, schema
    )


def _converter(settings: dict[str, Any]) -> AvroConverter:
    return AvroConverter(AvroConverterConfig(type="avro", schema_registry=settings), PluginContext("t", Path("t.yaml")))


def test_basic_auth_over_tls(secure_registry: SecureRegistry, topic_prefix: str) -> None:
    settings = {
        "url": secure_registry.url,
        "basic.auth.user.info": f"cdc:{PASSWORD}",
        "ssl.ca.location": str(secure_registry.ca),
    }
    converter = _converter(settings)
    data = converter.serialize_value(_event(1), f"{topic_prefix}.t")
    assert data is not None and _converter(settings).deserialize(f"{topic_prefix}.t", data)["after"] == {
        "id": 1,
        "note": "n1",
    }

    wrong_password = _converter({**settings, "basic.auth.user.info": "cdc:wrong"})
    with pytest.raises(SchemaRegistryUnavailableError, match="HTTP 401"):  # retried: credentials may be renewed
        wrong_password.serialize_value(_event(2), f"{topic_prefix}.t")
    unknown_ca = _converter({"url": secure_registry.url, "basic.auth.user.info": f"cdc:{PASSWORD}"})
    with pytest.raises(SchemaRegistryUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        unknown_ca.serialize_value(_event(3), f"{topic_prefix}.t")


@pytest.mark.kafka
def test_a_pipeline_takes_the_registry_password_from_the_environment(
    tmp_path: Path, kafka_bootstrap: str, secure_registry: SecureRegistry, topic_prefix: str
) -> None:
    file = tmp_path / "secure.yaml"
    file.write_text(
        f"name: secure-{topic_prefix}\n"
        "source: {type: datagen, count: 50, partitions: 1, tables: 1, op_mix: {c: 1}}\n"
        f'transforms: [{{type: route, regex: "(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        "sink:\n"
        "  type: kafka\n"
        f"  bootstrap_servers: '{kafka_bootstrap}'\n"
        "  converter: avro\n"
        "  schema_registry:\n"
        f"    url: {secure_registry.url}\n"
        '    basic.auth.user.info: "cdc:${REGISTRY_PASSWORD}"\n'
        f"    ssl.ca.location: {secure_registry.ca}\n"
        "checkpoint: {type: file, path: ckpt}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "REGISTRY_PASSWORD": PASSWORD},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert PASSWORD not in result.stderr  # the secret stays out of the log
    reader = _converter(
        {
            "url": secure_registry.url,
            "basic.auth.user.info": f"cdc:{PASSWORD}",
            "ssl.ca.location": str(secure_registry.ca),
        }
    )
    records = read_topics(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, topic_prefix))
    seqs = sorted(reader.deserialize(r.topic, r.value)["after"]["seq"] for r in records if r.value is not None)
    assert seqs == list(range(50))
