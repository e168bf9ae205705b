"""Bounded, honest start-up and shutdown against real brokers: a sink nobody answers for fails the
start naming the setting and address (librdkafka's reconnect errors rate-limited in the log);
refused credentials fail at once; SIGTERM while the sink no longer answers ends the process within
engine.shutdown_timeout_s, non-zero, without committing what the sink did not acknowledge."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from cdcflow.processes import EXIT_SHUTDOWN_TIMEOUT
from tests.integration.kafka_helpers import read_topics, run_cdcflow, start_logged, topics_with_prefix
from tests.integration.secure_kafka import PASSWORD, SecureKafka

pytestmark = pytest.mark.kafka


def test_a_kafka_sink_nobody_answers_fails_the_start_naming_setting_and_address(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: unreachable\n"
        "source: {type: datagen, count: 100}\n"
        "sink: {type: kafka, bootstrap_servers: '127.0.0.1:1'}\n"  # nothing listens: refused at once, retried
        "engine: {startup_timeout_s: 4}\n"
    )
    result = run_cdcflow("run", str(file), timeout=60)
    assert result.returncode == 1
    assert (
        "StartupCheckError: sink.bootstrap_servers: no Kafka broker at 127.0.0.1:1 answered within 4 s "
        "(engine.startup_timeout_s): Connect to ipv4#127.0.0.1:1 failed: Connection refused"
    ) in result.stderr
    # librdkafka logs each reconnect (about 20 a second here); the log shows the first only.
    librdkafka_lines = [line for line in result.stderr.splitlines() if "cdcflow.librdkafka" in line]
    assert 1 <= len(librdkafka_lines) <= 2, result.stderr[-3000:]


def test_refused_credentials_fail_the_start_at_once(
    tmp_path: Path, secure_kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_PASSWORD", PASSWORD + "-wrong")
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: refused\n"
        "source: {type: datagen, count: 100}\n"
        "sink: {type: file, path: out.jsonl}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{secure_kafka.sasl_ssl}', "
        f"kafka: {secure_kafka.client_block()}}}\n"
        "engine: {startup_timeout_s: 600}\n"  # not waited for: no wait cures a wrong password
    )
    result = run_cdcflow("run", str(file), timeout=60)
    assert result.returncode == 1
    assert (
        "StartupCheckError: checkpoint.kafka.sasl_username / checkpoint.kafka.sasl_password: the Kafka broker at "
        f"{secure_kafka.sasl_ssl} refused the credentials"
    ) in result.stderr
    assert not (tmp_path / "out.jsonl").exists()  # nothing was read before the check


# What ending a process takes past engine.shutdown_timeout_s: the exit itself, on a loaded machine.
_EXIT_TAKES_S = 2.0


def checkpoints(folder: Path) -> dict[str, int]:
    return {
        file.name.split(".", 1)[0]: json.loads(file.read_text())["offset"]["seq"]
        for file in folder.glob("*.checkpoint.json")
    }


@pytest.mark.slow
def test_sigterm_while_the_sink_does_not_answer_ends_within_the_bound_and_commits_nothing_unacknowledged(
    tmp_path: Path, secure_kafka: SecureKafka, topic_prefix: str
) -> None:
    count, shutdown_timeout_s = 8000, 5
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: frozen-{topic_prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: 2, event_size: 32, rate: 2000}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{secure_kafka.plaintext}', linger_ms: 20}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
        f"engine: {{shutdown_timeout_s: {shutdown_timeout_s}, max_records_per_read: 500}}\n"
    )
    process, log = start_logged(file)
    broker = secure_kafka.pid
    frozen = False
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if len(checkpoints(tmp_path / "ckpt")) == 2 and min(checkpoints(tmp_path / "ckpt").values()) > 0:
                break
            time.sleep(0.2)
        assert process.poll() is None, "".join(log)[-3000:]
        # The broker stops answering (its connections stay open, as with a hung or partitioned
        # broker); the pipeline goes on reading and producing into librdkafka's queue.
        os.kill(broker, signal.SIGSTOP)
        frozen = True
        time.sleep(1.5)  # a checkpoint falls due and its flush waits: not a timing assertion
        committed_before = checkpoints(tmp_path / "ckpt")
        process.send_signal(signal.SIGTERM)
        stopping_since = time.monotonic()
        process.wait(timeout=shutdown_timeout_s + 30)  # librdkafka alone would wait 5 minutes
        stopped_after = time.monotonic() - stopping_since
    finally:
        if frozen:
            os.kill(broker, signal.SIGCONT)
        if process.poll() is None:
            process.kill()
    print(f"\nSIGTERM with the sink frozen: exited {process.returncode} after {stopped_after:.1f} s")
    assert process.returncode == EXIT_SHUTDOWN_TIMEOUT
    # The bound the setting promises, with the little an exit takes (librdkafka alone waits 300 s).
    assert stopped_after <= shutdown_timeout_s + _EXIT_TAKES_S, f"exited {stopped_after:.1f} s after SIGTERM"
    assert any("not stopped within engine.shutdown_timeout_s = 5 s" in line for line in log)
    assert checkpoints(tmp_path / "ckpt") == committed_before, "nothing may be committed after the sink froze"

    # Every committed offset was acknowledged: the broker holds each partition's events below it.
    delivered = _delivered(secure_kafka, topic_prefix)
    for partition, seq in committed_before.items():
        assert set(range(seq)) <= delivered[partition], f"{partition}: committed {seq} without every event below it"

    # The rest is read again from those offsets: nothing lost.
    result = run_cdcflow("run", str(file), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    everything = _delivered(secure_kafka, topic_prefix)
    assert sum(len(seqs) for seqs in everything.values()) == count


def _delivered(broker: SecureKafka, prefix: str) -> dict[str, set[int]]:
    """Per datagen partition, the sequence numbers the broker holds."""
    by_partition: dict[str, set[int]] = defaultdict(set)
    for record in read_topics(broker.plaintext, topics_with_prefix(broker.plaintext, prefix)):
        if record.value is not None:
            payload: dict[str, Any] = json.loads(record.value)["payload"]
            # Positions count from 1; a committed {"seq": n} covers positions 1..n.
            by_partition[payload["source"]["partition"]].add(json.loads(payload["source"]["position"])["seq"] - 1)
    return by_partition
