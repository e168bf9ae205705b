"""At-least-once under SIGKILL, zero duplicates after SIGTERM, and a broker outage survived.

Every kill lands mid-stream after the run being killed committed a checkpoint of its own, and what
a kill replays is bounded by what one checkpoint interval delivers. The outage test stops and
starts a broker of its own (scripts/kafka.sh under another name and ports), never the shared one.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import event_id, read_topics, start_logged, start_worker, topics_with_prefix

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
MAX_RECORDS_PER_READ = 1000


def pipeline(folder: Path, prefix: str, bootstrap: str, count: int, rate: int) -> Path:
    file = folder / "crash.yaml"
    file.write_text(
        f"name: crash-{prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: {PARTITIONS}, tables: 2, keys: 500, "
        f"event_size: 32, rate: {rate}}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: 20}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
        f"engine: {{max_records_per_read: {MAX_RECORDS_PER_READ}, batch_size: 500}}\n"
    )
    return file


def delivered_counts(bootstrap: str, prefix: str) -> Counter[int]:
    received = read_topics(bootstrap, topics_with_prefix(bootstrap, prefix))
    return Counter(event_id(json.loads(r.value)["payload"]) for r in received if r.value is not None)


def test_sigkill_ten_times_loses_nothing(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    # 50 s of source time: every one of the 10 kills lands mid-stream (20 kills of 500,000 events:
    # benchmarks/exactly_once.py --kills 20).
    count, rate, interval_ms = 75_000, 1500, 300
    file = pipeline(tmp_path, topic_prefix, kafka_bootstrap, count, rate)
    runs = crash_runs(file, tmp_path / "ckpt", kills=10, seed=20261122, longest_s=0.6)
    final = start_worker(file)
    _, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr.decode()[-2000:]

    received = read_topics(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, topic_prefix))
    payloads = [json.loads(r.value)["payload"] for r in received if r.value is not None]
    counts = Counter(event_id(p) for p in payloads)
    missing = set(range(count)) - set(counts)
    duplicates = sum(counts.values()) - len(counts)
    print(f"\ncrash test: 10 SIGKILLs, {count} events, {len(missing)} lost, {duplicates} duplicates")
    assert not missing
    assert_each_kill_replays_about_one_interval(runs, payloads, interval_ms)


def test_sigterm_then_restart_has_no_duplicates(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    count = 20_000
    file = pipeline(tmp_path, topic_prefix, kafka_bootstrap, count, rate=4000)
    for stop_after in (0.5, 1.0):
        started = time.time()
        process = start_worker(file)
        # Once this run committed (its signal handlers are in place, on a loaded machine too),
        # stop it mid-stream.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            f.stat().st_mtime > started for f in (tmp_path / "ckpt").glob("*.json")
        ):
            time.sleep(0.1)
        time.sleep(stop_after)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()[-2000:]
    final = start_worker(file)
    _, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr.decode()[-2000:]

    counts = delivered_counts(kafka_bootstrap, topic_prefix)
    assert set(counts) == set(range(count))
    assert max(counts.values()) == 1, "a graceful stop must commit exactly what it flushed"


# A broker of the outage test's own, which it stops and starts (scripts/kafka.sh takes the name and ports).
OUTAGE_BROKER = {"KAFKA_NAME": "kafka-outage", "KAFKA_PORT": "19192", "KAFKA_CONTROLLER_PORT": "19193"}


def outage_broker(action: str) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "kafka.sh"), action],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **OUTAGE_BROKER},
    )
    assert done.returncode == 0, f"kafka.sh {action}: {done.stdout}{done.stderr}"


def test_broker_down_for_20_seconds_mid_stream_loses_nothing(tmp_path: Path, topic_prefix: str) -> None:
    count = 30_000
    bootstrap = f"127.0.0.1:{OUTAGE_BROKER['KAFKA_PORT']}"
    outage_broker("start")
    file = pipeline(tmp_path, topic_prefix, bootstrap, count, rate=1000)
    process, log = start_logged(file)
    try:
        deadline = time.monotonic() + 120
        while min(_committed_seqs(tmp_path / "ckpt").values(), default=0) == 0:  # every partition under way
            assert process.poll() is None and time.monotonic() < deadline, "".join(log)[-3000:]
            time.sleep(0.1)
        outage_broker("stop")
        down_since = time.monotonic()
        committed_when_down = _committed_seqs(tmp_path / "ckpt")
        while time.monotonic() - down_since < 20:
            assert process.poll() is None, "the pipeline must wait for the broker, not exit"
            time.sleep(0.5)
        # The outage bit: nothing was committed while the broker was away (the flush waited for
        # its acknowledgements), and the producer saw the broker go.
        assert _committed_seqs(tmp_path / "ckpt") == committed_when_down
        assert any("cdcflow.librdkafka" in line and "127.0.0.1:19192" in line for line in log), "".join(log)[-3000:]
        outage_broker("start")
        process.wait(timeout=300)
        assert process.returncode == 0, "".join(log)[-2000:]
        counts = delivered_counts(bootstrap, topic_prefix)
    finally:
        if process.poll() is None:
            process.kill()
        outage_broker("stop")
    missing = set(range(count)) - set(counts)
    duplicates = sum(counts.values()) - len(counts)
    print(f"\nbroker outage: {len(missing)} lost, {duplicates} duplicates")
    assert not missing
    # The idempotent producer retries what was in flight under its own sequence numbers: at most
    # what was read since the last checkpoint comes twice.
    assert duplicates <= PARTITIONS * MAX_RECORDS_PER_READ


def _committed_seqs(folder: Path) -> dict[str, int]:
    """Per partition, the committed datagen position (the file store writes each atomically)."""
    committed = {}
    for file in folder.glob("*.checkpoint.json"):
        try:
            committed[file.name.split(".")[0]] = json.loads(file.read_text())["offset"]["seq"]
        except (OSError, ValueError):
            continue  # replaced while read: the next look sees the new one
    return committed


Run = tuple[float, float, dict[str, int]]  # started, killed, what was committed when it was killed


def crash_runs(file: Path, checkpoints: Path, kills: int, seed: int, longest_s: float) -> list[Run]:
    """``kills`` runs of ``file``, each SIGKILLed at a random moment (up to ``longest_s``) after it
    committed a checkpoint of its own, while it still runs."""
    runs: list[Run] = []
    rng = random.Random(seed)
    for number in range(kills):
        before = sum(_committed_seqs(checkpoints).values())
        started = time.time()
        process = start_worker(file)
        deadline = time.monotonic() + 120
        while sum(_committed_seqs(checkpoints).values()) <= before:  # this run's own first checkpoint
            assert process.poll() is None and time.monotonic() < deadline, f"no checkpoint from run {number + 1}"
            time.sleep(0.01)
        time.sleep(rng.uniform(0, longest_s))  # a random moment mid-stream to crash at, not a timing assertion
        assert process.poll() is None, f"run {number + 1} ended before its kill: not mid-stream"
        process.send_signal(signal.SIGKILL)
        process.wait()
        runs.append((started, time.time(), _committed_seqs(checkpoints)))
    return runs


def assert_each_kill_replays_about_one_interval(runs: list[Run], payloads: list[dict], interval_ms: int) -> None:  # type: ignore[type-arg]
    """Every copy carries the time cdcflow made it (``ts_ms``), so each duplicate is charged to the
    run that wrote it: a run's replay is what it delivered past the position it had committed when
    it was killed. Commits come after each read once an interval has passed, and a read takes about
    one interval: what waits uncommitted is at most about two intervals of the run's delivery."""
    for number, (started, killed, at_kill) in enumerate(runs, 1):
        made = sorted(p["ts_ms"] for p in payloads if started * 1000 <= p["ts_ms"] <= killed * 1000)
        replayed = sum(
            1
            for p in payloads
            if started * 1000 <= p["ts_ms"] <= killed * 1000
            and event_id(p) // PARTITIONS + 1 > at_kill[f"datagen-{event_id(p) % PARTITIONS}"]
        )
        busiest = max((bisect.bisect_right(made, t + interval_ms) - i for i, t in enumerate(made)), default=0)
        print(f"run {number}: delivered {len(made)}, busiest {interval_ms} ms {busiest}, replayed {replayed}")
        assert replayed <= 2 * busiest + PARTITIONS * 100, (number, replayed, busiest)


def test_a_crash_loop_moves_forward_and_each_kill_replays_at_most_one_interval(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """Ten SIGKILLs, each at a random moment after the run committed a checkpoint of its own.

    Every copy in Kafka carries the time cdcflow made it (``ts_ms``), so each duplicate is
    charged to the run that wrote it: a run's replay is what it delivered past the position it
    had committed when it was killed. That must stay within about one checkpoint interval of the
    run's own delivery (its busiest ``interval_ms`` window), whatever the backlog."""
    rate, interval_ms = 4000, 1000
    count = 400_000  # far more than ten restarts reach: the last run is stopped, not drained
    file = tmp_path / "loop.yaml"
    file.write_text(
        f"name: crash-loop-{topic_prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: {PARTITIONS}, tables: 2, keys: 500, "
        f"event_size: 32, rate: {rate}}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', linger_ms: 20}}\n"
        f"checkpoint: {{type: file, path: ckpt, interval_ms: {interval_ms}}}\n"
    )
    runs = crash_runs(file, tmp_path / "ckpt", kills=10, seed=20261125, longest_s=1.5)
    # A graceful last run: what it flushed is committed, so everything delivered is accounted for.
    final = start_worker(file)
    while sum(_committed_seqs(tmp_path / "ckpt").values()) <= sum(runs[-1][2].values()):
        time.sleep(0.01)
    final.send_signal(signal.SIGTERM)
    _, stderr = final.communicate(timeout=120)
    assert final.returncode == 0, stderr.decode()[-2000:]

    committed = _committed_seqs(tmp_path / "ckpt")
    received = read_topics(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, topic_prefix))
    copies = [json.loads(r.value)["payload"] for r in received if r.value is not None]
    delivered = {event_id(p) for p in copies}
    # Nothing committed is missing (global id g is the (g // P + 1)-th event of partition g % P).
    assert all(g in delivered for p, seq in committed.items() for g in range(int(p[-1]), seq * PARTITIONS, PARTITIONS))
    totals = [sum(c.values()) for _, _, c in runs]
    assert all(later > earlier for earlier, later in itertools.pairwise(totals)), totals  # the loop moves forward
    assert_each_kill_replays_about_one_interval(runs, copies, interval_ms)
