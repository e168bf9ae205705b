"""Debezium's Cassandra 5 connector, as scripts/debezium.sh resolves it for ``peers.py debezium``,
starts: its agent's main class and what it loads before reading its configuration are all on the
classpath. Resolving it from Maven Central takes minutes on a fresh machine, so this runs only
when asked (CDCFLOW_DEBEZIUM_SMOKE=1), never in CI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("CDCFLOW_DEBEZIUM_SMOKE") != "1",
    reason="resolves Debezium from Maven Central: CDCFLOW_DEBEZIUM_SMOKE=1",
)


def test_the_resolved_debezium_agent_starts_and_asks_for_its_configuration() -> None:
    libs = subprocess.run(
        ["bash", str(REPO / "scripts" / "debezium.sh"), "install"], check=True, capture_output=True, text=True
    ).stdout.strip()
    jars = {path.name for path in Path(libs).glob("*.jar")}
    assert "debezium-connector-cassandra-5-3.4.0.Final.jar" in jars
    assert "debezium-connector-cassandra-core-3.4.0.Final.jar" in jars
    # Kafka 4.1's JsonConverter needs jackson 2.19 or newer (cassandra-all alone brings 2.13).
    assert "jackson-databind-2.19.0.jar" in jars
    started = subprocess.run(
        ["java", "-cp", f"{libs}/*", "io.debezium.connector.cassandra.CassandraConnectorTask"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Without a properties file the agent stops at its first check (CassandraConnectorTaskTemplate.main),
    # with Debezium's own exception: not a class missing from the classpath.
    assert "CassandraConnectorConfigException: CDC config file is required" in started.stderr, started.stderr
