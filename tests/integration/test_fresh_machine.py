"""The README's first command on a fresh machine, from a plain shell: a fresh clone of the committed
repository, run through ``env -i`` with nothing but the system's folders on PATH, so neither the
project's .venv nor a Python holding cdcflow's packages is there. ``bash scripts/demo.sh`` takes the
set-up path both of the README's commands share (scripts/setup.sh into the clone's own .venv, then
``services.sh install`` and ``start``), and the service scripts' start and status checks run on the
system alone. The clone's broker is a Kafka of its own (KAFKA_NAME, KAFKA_PORT, CDCFLOW_DATA), not
the shared one on 9092, and is stopped afterwards.

About a minute and a half: installing into a new virtual environment from pip's cache, without the
compiled core (CDCFLOW_NATIVE_BUILD=0: the Rust build is not what this is about); Maven artifacts
come from the machine's cache folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import REPO
from tests.integration.group_helpers import free_port
from tests.integration.kafka_helpers import event_id, read_topics, topics_with_prefix

pytestmark = pytest.mark.kafka

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class FreshMachine:
    """A clone and the only environment variables its commands see."""

    clone: Path
    env: dict[str, str]
    kafka_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def kafka_pidfile(self) -> Path:
        return Path(self.env["CDCFLOW_DATA"]) / self.env["KAFKA_NAME"] / "kafka.pid"

    def run(self, *command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        variables = [f"{name}={value}" for name, value in self.env.items()]
        return subprocess.run(
            ["env", "-i", *variables, *command],
            cwd=self.clone,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def fresh_machine(tmp_path: Path) -> Iterator[FreshMachine]:
    clone = tmp_path / "cdcflow"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    home = os.environ["HOME"]
    kafka_port = free_port()
    machine = FreshMachine(
        clone,
        {
            "HOME": home,
            "PATH": SYSTEM_PATH,
            "CDCFLOW_CACHE": os.environ.get("CDCFLOW_CACHE", f"{home}/.cache/cdcflow"),
            "CDCFLOW_DATA": str(tmp_path / "run"),
            "CDCFLOW_NATIVE_BUILD": "0",
            "KAFKA_NAME": "kafka-fresh-machine",
            "KAFKA_PORT": str(kafka_port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
        },
        kafka_port,
    )
    try:
        yield machine
    finally:
        machine.run("bash", "scripts/kafka.sh", "stop", timeout=120)
        shutil.rmtree(clone, ignore_errors=True)  # its .venv is about 1 GB


def test_demo_runs_from_a_plain_shell_on_a_fresh_clone(fresh_machine: FreshMachine) -> None:
    demo = fresh_machine.run("bash", "scripts/demo.sh", timeout=900)
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert demo.stdout.splitlines()[-1].startswith(
        f"done: topics cdc.datagen.shop.table_{{0,1,2}} on {fresh_machine.bootstrap}"
    ), demo.stdout[-2000:]

    # status tells the truth from the same plain shell: the broker the demo started runs.
    status = fresh_machine.run("bash", "scripts/services.sh", "status", "kafka")
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.split() == ["kafka", "running", fresh_machine.bootstrap]
    broker_pid = int(fresh_machine.kafka_pidfile.read_text())

    # A second start finds that broker and launches no other.
    again = fresh_machine.run("bash", "scripts/services.sh", "start", "kafka")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already running" in again.stdout
    assert int(fresh_machine.kafka_pidfile.read_text()) == broker_pid

    # The demo wrote every change its pipeline's source makes, once (tombstones aside).
    pipeline = yaml.safe_load((fresh_machine.clone / "config" / "datagen-to-kafka.yaml").read_text())
    topics = topics_with_prefix(fresh_machine.bootstrap, "cdc.")
    payloads = [
        json.loads(record.value)["payload"]
        for record in read_topics(fresh_machine.bootstrap, topics)
        if record.value is not None
    ]
    counts = Counter(event_id(payload) for payload in payloads)
    assert set(counts) == set(range(pipeline["source"]["count"]))
    assert max(counts.values()) == 1

    # stop stops it, and status then says so.
    stop = fresh_machine.run("bash", "scripts/kafka.sh", "stop", timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(broker_pid, 0)
    stopped = fresh_machine.run("bash", "scripts/services.sh", "status", "kafka")
    assert (stopped.returncode, stopped.stdout.split()) == (1, ["kafka", "stopped"])
