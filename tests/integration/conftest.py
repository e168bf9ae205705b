"""Real services for integration tests: the Kafka broker and schema registry from scripts/.

A running service is reused; otherwise the fixture starts it with the repo's own script.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
KAFKA_BOOTSTRAP = os.environ.get("CDCFLOW_KAFKA", "127.0.0.1:9092")
# Apicurio Registry's Confluent-compatible API, as scripts/schema_registry.sh runs it (REGISTRY_PORT).
REGISTRY_URL = os.environ.get(
    "CDCFLOW_REGISTRY", f"http://127.0.0.1:{os.environ.get('REGISTRY_PORT', '8081')}/apis/ccompat/v7"
)


def _service(script: str, action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / script), action], capture_output=True, text=True, timeout=900, check=False
    )


def ensure_service(script: str) -> None:
    if _service(script, "status").returncode == 0:
        return
    started = _service(script, "start")
    if started.returncode != 0:
        pytest.fail(f"{script} start failed:\n{started.stdout}\n{started.stderr}")


def _topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60).topics)


# The prefixes of the topics this session's tests name (``topic_prefix``): what the session
# deletes at its end. Only those: another session on the same broker (a second
# pytest, a benchmark) may be using the topics it made meanwhile.
_SESSION_TOPIC_PREFIXES: list[str] = []


def delete_topics_named_with(bootstrap: str, prefixes: list[str]) -> int:
    """Deletes the topics whose names hold one of ``prefixes`` (each issued once, at random, so
    no topic made before the session holds one); returns how many. Every test names its topics
    afresh, so without this a broker kept between runs collects thousands of partitions, and one
    with 13,000 took over two minutes to start."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    made = sorted(name for name in _topic_names(bootstrap) if any(prefix in name for prefix in prefixes))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for start in range(0, len(made), 500):
        for future in admin.delete_topics(made[start : start + 500], operation_timeout=60).values():
            try:
                future.result(timeout=120)
            except KafkaException as exc:  # a test deleted it already
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
    return len(made)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The broker scripts/kafka.sh runs; the topics the session made are deleted at its end."""
    ensure_service("kafka.sh")
    yield KAFKA_BOOTSTRAP
    delete_topics_named_with(KAFKA_BOOTSTRAP, _SESSION_TOPIC_PREFIXES)


@pytest.fixture(scope="session")
def registry_url(kafka_bootstrap: str) -> str:
    if not (REPO / "scripts" / "schema_registry.sh").exists():
        pytest.skip("no schema registry service script in this version (scripts/schema_registry.sh)")
    ensure_service("schema_registry.sh")
    return REGISTRY_URL


@pytest.fixture(scope="session")
def secure_kafka() -> Any:
    """A second broker with a SASL_SSL listener (scripts/kafka_secure.sh), certificates made by
    the tests: a ``tests.integration.secure_kafka.SecureKafka``."""
    from tests.integration.secure_kafka import ensure_secure_kafka

    try:
        return ensure_secure_kafka()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def topic_prefix() -> Iterator[str]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    _SESSION_TOPIC_PREFIXES.append(prefix)
    yield prefix


CASSANDRA_HOST = os.environ.get("CDCFLOW_CASSANDRA", "127.0.0.1")
CASSANDRA_DATA = (
    Path(
        os.environ.get(
            "CDCFLOW_DATA", Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow")) / "run"
        )
    )
    / "cassandra"
)


@pytest.fixture(scope="session")
def cassandra_session() -> Iterator[object]:
    """A cassandra-driver session on the real node scripts/cassandra.sh runs (CDC on, 1 MiB segments)."""
    ensure_service("cassandra.sh")
    from cdcflow.sources.cassandra_commitlog.cluster import connect

    cluster, session = connect([CASSANDRA_HOST])
    yield session
    cluster.shutdown()


@pytest.fixture(scope="session")
def cdc_raw_dir(cassandra_session: object) -> Path:
    return CASSANDRA_DATA / "cdc_raw"


@pytest.fixture
def keyspace(cassandra_session: object) -> Iterator[str]:
    """A keyspace of its own for one test (RF 1), dropped afterwards."""
    name = f"k{uuid.uuid4().hex[:10]}"
    session: Any = cassandra_session
    session.execute(f"CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}")
    yield name
    session.execute(f"DROP KEYSPACE IF EXISTS {name}")
