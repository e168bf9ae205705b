"""A ring of two real nodes with RF = 2: every replica's commit log holds every change.

One worker per node, each reading its own node's cdc_raw. Every change arrives in Kafka; with
both nodes up each is emitted once (by its primary replica); with one node down, the other
takes over its ranges and nothing is lost.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel

from tests.integration.conftest import CASSANDRA_DATA, REPO
from tests.integration.kafka_helpers import read_topics, topics_with_prefix

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RING = CASSANDRA_DATA.parent / "cassandra-ring"
NODES = {"node1": "127.0.0.11", "node2": "127.0.0.12"}


def _ring(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "cassandra_ring.sh"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def ring() -> Iterator[Any]:
    started = _ring("status", "2").returncode != 0
    if started:
        result = _ring("start", "2")
        if result.returncode != 0:
            pytest.fail(f"the ring did not start:\n{result.stdout}\n{result.stderr}")
    from cdcflow.sources.cassandra_commitlog.cluster import connect

    cluster, session = connect([NODES["node1"]])
    yield session
    cluster.shutdown()
    if started:
        _ring("stop", "2")
    else:
        _ring("start", "2")  # leave it as it was found: running


class _Worker:
    def __init__(self, folder: Path, name: str, prefix: str, bootstrap: str, keyspace: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.file = folder / f"{name}.yaml"
        address = NODES[name]
        self.file.write_text(
            f"name: ring-{prefix}-{name}\n"
            f"source: {{type: cassandra_commitlog, cdc_raw: '{RING / name / 'cdc_raw'}', hosts: ['{address}'],"
            f" node_address: '{address}', node: {name}, cluster: {prefix}, tables: [{keyspace}.orders],"
            " processed_segments: keep, error_store: {type: file, path: errors.jsonl}}\n"
            f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: 20}}\n"
            "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
        )
        self.log: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cdcflow.cli", "run", str(self.file)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.log.append(raw.decode(errors="replace"))

    def running(self) -> bool:
        return any(" running: " in line for line in self.log)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=60) == 0, "".join(self.log[-30:])


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def _delivered(bootstrap: str, prefix: str) -> Counter[int]:
    received = read_topics(bootstrap, topics_with_prefix(bootstrap, f"{prefix}."))
    return Counter(json.loads(r.value)["payload"]["after"]["id"] for r in received if r.value is not None)


def test_each_change_once_from_its_primary_and_all_of_them_with_a_node_down(
    ring: Any, tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    session = ring
    keyspace = f"r{uuid.uuid4().hex[:10]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 2}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int) WITH cdc = true")
    insert = session.prepare(f"INSERT INTO {keyspace}.orders (id, total) VALUES (?, ?)")
    insert.consistency_level = ConsistencyLevel.ALL  # both commit logs hold every row

    workers = {name: _Worker(tmp_path / name, name, topic_prefix, kafka_bootstrap, keyspace) for name in NODES}
    _wait_for(lambda: all(w.running() for w in workers.values()), 120, "both workers to start")
    for row in range(500):
        session.execute(insert, (row, row))
    _wait_for(lambda: set(_delivered(kafka_bootstrap, topic_prefix)) >= set(range(500)), 120, "500 rows")
    time.sleep(3)  # let a late duplicate show up, if one were coming; the assertion below is on counts
    delivered = _delivered(kafka_bootstrap, topic_prefix)
    duplicates = sum(count - 1 for count in delivered.values())
    assert set(delivered) == set(range(500))
    assert duplicates == 0, f"{duplicates} of 500 changes emitted by both replicas while both were up"

    # node2 goes down; node1's worker (restarted, so its driver sees the ring as it is now) takes over.
    workers["node1"].stop()
    assert _ring("stop-node", "2").returncode == 0
    try:
        workers["node1"] = _Worker(tmp_path / "node1", "node1", topic_prefix, kafka_bootstrap, keyspace)
        _wait_for(workers["node1"].running, 120, "node1's worker to restart")
        insert.consistency_level = ConsistencyLevel.ONE
        for row in range(500, 800):
            session.execute(insert, (row, row))
        _wait_for(lambda: set(_delivered(kafka_bootstrap, topic_prefix)) >= set(range(800)), 120, "rows 500-799")
    finally:
        for worker in workers.values():
            if worker.process.poll() is None:
                worker.stop()
        assert _ring("start-node", "2").returncode == 0
