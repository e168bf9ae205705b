"""Worker groups under test: several ``cdcflow run`` processes of one pipeline file, each with its
own REST port, and what they report and wrote."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import event_id, read_topics, topics_with_prefix


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def group_section(bootstrap: str, group_id: str, coordinator: str, buckets: int, **extra: Any) -> str:
    """The ``engine.group`` block every member shares; the REST port comes from REST_PORT."""
    settings = {
        "coordinator": coordinator,
        "bootstrap_servers": bootstrap,
        "id": group_id,
        "buckets": buckets,
        "session_timeout_s": 6,
        "heartbeat_interval_s": 1,
        "status_interval_s": 1,
        **extra,
    }
    body = ", ".join(f"{k}: {json.dumps(v)}" for k, v in settings.items())
    return f'{{{body}, rest: {{port: "${{REST_PORT:-8083}}"}}}}'


def datagen_group_pipeline(
    folder: Path,
    prefix: str,
    bootstrap: str,
    coordinator: str,
    buckets: int,
    source: str,
    max_records_per_read: int = 200,
    delivery: str = "at_least_once",
    checkpoint: str = "interval_ms: 500, transaction_timeout_s: 10",
) -> Path:
    file = folder / "group.yaml"
    file.write_text(
        f"name: group-{prefix}\n"
        f"source: {{type: datagen, {source}, tables: 2, keys: 400, event_size: 16}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: 10, delivery: {delivery}}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{bootstrap}', {checkpoint}}}\n"
        f"engine:\n  max_records_per_read: {max_records_per_read}\n  batch_size: 200\n"
        f"  group: {group_section(bootstrap, f'grp-{prefix}', coordinator, buckets)}\n"
    )
    return file


@dataclass
class Member:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> Any:
        response = requests.get(self.url + path, timeout=10)
        response.raise_for_status()
        return response.json()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)


@dataclass
class Group:
    """The members of one group, started from one pipeline file."""

    file: Path
    folder: Path
    members: dict[str, Member] = field(default_factory=dict)

    def start(self, name: str, wrap: Sequence[str] = ()) -> Member:
        """A member; ``wrap`` runs it through a command (``ip netns exec NS``)."""
        port = free_port()
        log = self.folder / f"{name}.log"
        process = subprocess.Popen(
            [*wrap, sys.executable, "-m", "cdcflow.cli", "run", str(self.file)],
            cwd=REPO,
            env={**os.environ, "REST_PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        member = Member(name, port, process, log)
        self.members[name] = member
        return member

    def running(self) -> list[Member]:
        return [m for m in self.members.values() if m.process.poll() is None]

    def ownership(self, members: list[Member]) -> dict[str, list[int]]:
        """Buckets by worker, as each member reports itself (GET /), through its REST API."""
        found = {}
        for member in members:
            try:
                found[member.name] = member.get("/workers")
            except requests.RequestException:
                continue
        owned: dict[str, list[int]] = {}
        for name, answer in found.items():
            me = f":{self.members[name].port}"
            for row in answer["workers"]:
                if row["worker"].endswith(me):
                    owned[name] = row["buckets"]
        return owned

    def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Seconds it took for ``condition`` to hold; fails the test after ``timeout_s``."""
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout_s:
                logs = "\n".join(f"--- {m.name}\n{m.log_text()[-3000:]}" for m in self.members.values())
                pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}\n{logs}")
            time.sleep(0.2)
        return time.monotonic() - started

    def owns_all(self, members: list[Member], buckets: int) -> bool:
        owned = self.ownership(members)
        together = [b for name in owned for b in owned[name]]
        return len(owned) == len(members) and sorted(together) == list(range(buckets)) and all(owned.values())

    def wait_for_exit(self, member: Member, timeout_s: float = 240) -> int:
        try:
            return member.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{member.name} did not finish within {timeout_s} s:\n{member.log_text()[-3000:]}")

    def kill_all(self) -> None:
        for member in self.members.values():
            if member.process.poll() is None:
                member.process.kill()
                member.process.wait()


def delivered(bootstrap: str, prefix: str) -> Counter[int]:
    """How often each datagen event id arrived in the pipeline's topics."""
    received = read_topics(bootstrap, topics_with_prefix(bootstrap, prefix + "."))
    return Counter(event_id(json.loads(r.value)["payload"]) for r in received if r.value is not None)


def committed_history(bootstrap: str, pipeline: str, topic: str = "cdcflow-offsets") -> dict[str, list[int]]:
    """Every checkpoint a pipeline committed (read_committed, in log order): datagen seq by partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cdcflow-tests-offsets",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        numbers = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, n, 0) for n in numbers])
        remaining, history = set(numbers), {}
        while remaining:
            message = consumer.poll(30)
            assert message is not None, "the offsets topic stopped answering"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                remaining.discard(message.partition())
                continue
            name, partition_id = json.loads(message.key())
            if name == pipeline and message.value() is not None:
                history.setdefault(partition_id, []).append(json.loads(message.value())["offset"]["seq"])
        return history
    finally:
        consumer.close()
