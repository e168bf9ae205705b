"""A second real Cassandra node as production clusters run it: CQL only over TLS with client
certificates, PasswordAuthenticator, and the guardrail partition_keys_in_select_fail_threshold at
100 (scripts/cassandra_secure.sh, 127.0.0.21). Started once per test session when a test needs it
(a JVM start: about 15 s on an idle machine), and stopped afterwards if this session started it.

Cassandra's guardrails spare superusers, so the sources connect as ``cdcflow_reader``, an
ordinary role; tables are made through the superuser ``cassandra``."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO

SECURE_HOST = "127.0.0.21"
SECURE_DATA = (
    Path(
        os.environ.get(
            "CDCFLOW_DATA", Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow")) / "run"
        )
    )
    / "cassandra-secure"
)
READER, READER_PASSWORD = "cdcflow_reader", "reader-secret"


@dataclass(frozen=True)
class SecureNode:
    host: str
    tls: Path  # ca.pem, client-cert.pem, client-key.pem, stranger-ca.pem
    cdc_raw: Path
    session: Any  # the superuser's

    def ssl(self, **overrides: Any) -> dict[str, Any]:
        """The ``ssl`` section of a source's config."""
        return {
            "ca": str(self.tls / "ca.pem"),
            "cert": str(self.tls / "client-cert.pem"),
            "key": str(self.tls / "client-key.pem"),
            **overrides,
        }

    def reader(self) -> dict[str, Any]:
        """Host, credentials and TLS of the ordinary role, for a source's config."""
        return {"hosts": [self.host], "username": READER, "password": READER_PASSWORD, "ssl": self.ssl()}


def _script(action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "cassandra_secure.sh"), action],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def connect_secure(username: str, password: str, tls: Path, host: str = SECURE_HOST) -> tuple[Any, Any]:
    from cdcflow.sources.cassandra_commitlog.cluster import connect
    from cdcflow.sources.cql.connection import CqlClientSecurity

    security = CqlClientSecurity.model_validate(
        {
            "username": username,
            "password": password,
            "ssl": {"ca": tls / "ca.pem", "cert": tls / "client-cert.pem", "key": tls / "client-key.pem"},
        }
    )
    return connect([host], security=security)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def secure_node() -> Iterator[SecureNode]:
    started = _script("status").returncode != 0
    if started:
        result = _script("start")
        if result.returncode != 0:
            pytest.fail(f"scripts/cassandra_secure.sh start failed:\n{result.stdout}\n{result.stderr}")
    tls = SECURE_DATA / "tls"
    deadline = time.monotonic() + 120
    while True:  # the default superuser appears once the node has set up its auth tables
        try:
            cluster, session = connect_secure("cassandra", "cassandra", tls)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    session.execute(
        f"CREATE ROLE IF NOT EXISTS {READER} WITH PASSWORD = '{READER_PASSWORD}' AND LOGIN = true AND SUPERUSER = false"
    )
    yield SecureNode(SECURE_HOST, tls, SECURE_DATA / "node" / "cdc_raw", session)
    cluster.shutdown()
    if started:
        _script("stop")


@pytest.fixture
def secure_keyspace(secure_node: SecureNode) -> Iterator[str]:
    name = f"s{uuid.uuid4().hex[:10]}"
    secure_node.session.execute(
        f"CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    yield name
    secure_node.session.execute(f"DROP KEYSPACE IF EXISTS {name}")
