"""Worker groups: how fast partitions move, and what coordination costs in throughput.

Timings (per coordinator, ``--runs`` times): three ``cdcflow run`` members of one datagen -> Kafka
pipeline (endless, at ``--rate``), then

* **failover**: SIGKILL one member; "owned" is when the survivors' REST APIs report every bucket
  theirs, "delivering" when every partition the dead member held has a record in Kafka again
  (record timestamps are set by the producing member, on this machine's clock);
* **handover**: SIGTERM another; until each of its partitions has a record from its new owner;
* **join**: a new member starts; "owned" is from its start until it owns buckets, "stall" the
  longest gap in the records of the partitions it took over.

Throughput: a bounded datagen (``--events``, no rate) through a plain ``cdcflow run`` and through
groups of 1, 2 and 3 members, side by side; events/s from the first to the last record written
(steady state), end to end, and per CPU-second of all the processes.

    python benchmarks/worker_group.py --runs 5
    python benchmarks/worker_group.py --only throughput --events 300000

Needs the local broker (``bash scripts/services.sh start kafka``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from confluent_kafka import Consumer, KafkaError, TopicPartition

PARTITIONS = 8


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _pipeline(folder: Path, prefix: str, args: argparse.Namespace, coordinator: str | None, source: str) -> Path:
    group = ""
    if coordinator is not None:
        group = (
            f"  group: {{coordinator: {coordinator}, bootstrap_servers: '{args.bootstrap}', id: grp-{prefix}, "
            f"buckets: {args.buckets}, session_timeout_s: {args.session_timeout}, "
            f"heartbeat_interval_s: {args.heartbeat}, status_interval_s: 1, "
            'rest: {port: "${REST_PORT}"}}\n'
        )
    file = folder / f"{prefix}.yaml"
    file.write_text(
        f"name: {prefix}\n"
        f"source: {{type: datagen, {source}, partitions: {PARTITIONS}, tables: 2, event_size: {args.event_size}}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{args.bootstrap}', linger_ms: 5}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{args.bootstrap}', interval_ms: 1000}}\n"
        f"engine:\n  poll_interval_ms: 50\n{group}"
    )
    return file


class _Member:
    def __init__(self, file: Path, folder: Path, name: str) -> None:
        self.port = _free_port()
        self.name = name
        self.log = folder / f"{file.stem}-{name}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
            env={**os.environ, "REST_PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )
        self.started = time.time()
        self.exited: float | None = None
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self.process.wait()
        self.exited = time.time()

    def get(self, path: str) -> Any:
        return requests.get(f"http://127.0.0.1:{self.port}{path}", timeout=5).json()

    def buckets(self) -> list[int] | None:
        """This member's buckets as it reports them itself."""
        try:
            rows = self.get("/workers")["workers"]
        except (requests.RequestException, ValueError):
            return None
        mine = [r["buckets"] for r in rows if r["worker"].endswith(f":{self.port}")]
        return mine[0] if mine else None

    def partitions(self, pipeline: str) -> list[str]:
        rows = self.get(f"/pipelines/{pipeline}/status")["partitions"]
        return sorted(p for p, row in rows.items() if row["owner"].endswith(f":{self.port}"))


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """The wall-clock time at which ``condition`` first held (polled every 50 ms)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)
    return time.time()


def _owns_all(members: list[_Member], buckets: int) -> bool:
    owned = [m.buckets() for m in members]
    if any(b is None or not b for b in owned):
        return False
    return sorted(b for found in owned if found for b in found) == list(range(buckets))


def _records_by_partition(bootstrap: str, prefix: str) -> dict[str, list[float]]:
    """Write times (s) of every record, by datagen partition, read back from the pipeline's topics."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    times: dict[str, list[float]] = {}
    try:
        metadata = consumer.list_topics(timeout=30)
        assignment = [
            TopicPartition(topic, number, 0)
            for topic, described in metadata.topics.items()
            if topic.startswith(prefix + ".")
            for number in described.partitions
        ]
        consumer.assign(assignment)
        remaining = {(tp.topic, tp.partition) for tp in assignment}
        while remaining:
            for message in consumer.consume(2000, timeout=5.0) or [None]:
                if message is None:
                    remaining.clear()  # nothing more within 5 s
                    break
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        remaining.discard((message.topic(), message.partition()))
                    continue
                if message.value() is None:
                    continue
                partition = json.loads(message.value())["payload"]["source"]["partition"]
                times.setdefault(partition, []).append(message.timestamp()[1] / 1000)
    finally:
        consumer.close()
    for values in times.values():
        values.sort()
    return times


def _first_after(times: list[float], moment: float) -> float | None:
    return next((t for t in times if t > moment), None)


def timing_run(args: argparse.Namespace, coordinator: str, folder: Path) -> dict[str, float]:
    prefix = f"bgrp{uuid.uuid4().hex[:8]}"
    file = _pipeline(folder, prefix, args, coordinator, f"rate: {args.rate}")
    members = [_Member(file, folder, f"w{i}") for i in range(3)]
    spawned = list(members)
    try:
        _wait(lambda: _owns_all(members, args.buckets), 180, "three members to share the buckets")
        time.sleep(3)
        killed = max(members, key=lambda m: len(m.partitions(prefix)))  # 8 partitions, 12 buckets: some hold none
        moved_by_kill = killed.partitions(prefix)
        kill_at = time.time()
        killed.process.send_signal(signal.SIGKILL)
        survivors = [m for m in members if m is not killed]
        owned_after_kill = _wait(lambda: _owns_all(survivors, args.buckets), 120, "failover")
        time.sleep(3)

        leaver = max(survivors, key=lambda m: len(m.partitions(prefix)))
        staying = next(m for m in survivors if m is not leaver)
        moved_by_term = leaver.partitions(prefix)
        term_at = time.time()
        leaver.process.send_signal(signal.SIGTERM)
        owned_after_term = _wait(lambda: _owns_all([staying], args.buckets), 120, "handover")
        _wait(lambda: leaver.exited is not None, 60, "the SIGTERMed member to exit")
        time.sleep(3)

        joiner = _Member(file, folder, "w3")
        spawned.append(joiner)
        owned_after_join = _wait(lambda: bool(joiner.buckets()), 120, "the joiner to own buckets")
        _wait(lambda: _owns_all([staying, joiner], args.buckets), 120, "the joiner's rebalance")
        time.sleep(3)
        moved_by_join = joiner.partitions(prefix)
    finally:
        for member in spawned:
            if member.process.poll() is None:
                member.process.send_signal(signal.SIGTERM)
        for member in spawned:
            try:
                member.process.wait(60)
            except subprocess.TimeoutExpired:
                member.process.kill()

    times = _records_by_partition(args.bootstrap, prefix)
    delivering_after_kill = max((_first_after(times[p], kill_at) or float("inf")) for p in moved_by_kill)
    assert leaver.exited is not None
    delivering_after_term = max((_first_after(times[p], leaver.exited) or float("inf")) for p in moved_by_term)
    stall = 0.0
    for p in moved_by_join:
        around = [t for t in times[p] if joiner.started <= t]
        gaps = [b - a for a, b in itertools.pairwise(around)]
        stall = max([stall, *gaps])
    return {
        "failover_owned_s": owned_after_kill - kill_at,
        "failover_delivering_s": delivering_after_kill - kill_at,
        "handover_owned_s": owned_after_term - term_at,
        "handover_delivering_s": delivering_after_term - term_at,
        "join_owned_s": owned_after_join - joiner.started,
        "join_stall_s": stall,
    }


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a running process (from /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def throughput_run(args: argparse.Namespace, coordinator: str | None, members: int, folder: Path) -> dict[str, Any]:
    """One run; "steady" figures count only the time between the first and the last record
    written (and the CPU the members used meanwhile), not start-up, joining and leaving."""
    prefix = f"bthr{uuid.uuid4().hex[:8]}"
    file = _pipeline(folder, prefix, args, coordinator, f"count: {args.events}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    processes = [_Member(file, folder, f"w{i}") for i in range(members)]
    samples: list[tuple[float, float]] = []  # (time, CPU seconds of all members so far)
    last_seen: dict[int, float] = {}
    while any(m.process.poll() is None for m in processes):
        for m in processes:
            used = _cpu_s(m.process.pid)
            if used is not None:
                last_seen[m.process.pid] = used
        samples.append((time.time(), sum(last_seen.values())))
        time.sleep(0.1)
    codes = [m.process.wait() for m in processes]
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    times = _records_by_partition(args.bootstrap, prefix)
    written = [t for values in times.values() for t in values]
    first, last = min(written), max(written)

    def cpu_at(moment: float) -> float:
        return next((used for at, used in samples if at >= moment), samples[-1][1])

    steady_cpu = cpu_at(last) - cpu_at(first)
    return {
        "setup": "plain worker" if coordinator is None else f"{coordinator} group of {members}",
        "exit_codes": codes,
        "events": len(written),
        "events_per_s_steady": round(len(written) / (last - first)) if last > first else 0,
        "events_per_cpu_s_steady": round(len(written) / steady_cpu) if steady_cpu > 0 else 0,
        "events_per_s_end_to_end": round(len(written) / (ended - started)),
        "cpu_s": round(cpu, 1),
    }


def _summary(values: list[float]) -> str:
    return f"min {min(values):.2f}  median {statistics.median(values):.2f}  max {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--coordinator", choices=["faust", "kafka", "both"], default="both")
    parser.add_argument("--only", choices=["timings", "throughput"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=int, default=2000, help="events/s of the timing runs' datagen")
    parser.add_argument("--events", type=int, default=300_000, help="events of each throughput run")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs of each setup")
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--buckets", type=int, default=12)
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    args = parser.parse_args()
    coordinators = ["faust", "kafka"] if args.coordinator == "both" else [args.coordinator]
    folder = Path(tempfile.mkdtemp(prefix="cdcflow-bench-group-"))
    print(f"logs and pipeline files in {folder}")

    if args.only != "throughput":
        for coordinator in coordinators:
            results = [timing_run(args, coordinator, folder) for _ in range(args.runs)]
            print(
                f"\n{coordinator} coordinator, {args.runs} runs, session {args.session_timeout:g} s, "
                f"heartbeat {args.heartbeat:g} s (aims: failover <= session + 2 s, handover <= 3 s):"
            )
            for key in results[0]:
                print(f"  {key:>24}: {_summary([r[key] for r in results])}")
    if args.only != "timings":
        setups: list[tuple[str | None, int]] = [(None, 1)] + [(c, n) for c in coordinators for n in (1, 2, 3)]
        runs: dict[tuple[str | None, int], list[dict[str, Any]]] = {setup: [] for setup in setups}
        for _ in range(args.repeat):  # interleaved, so that a busy minute on the machine hits all alike
            for setup in setups:
                runs[setup].append(throughput_run(args, *setup, folder))
        print(
            f"\nthroughput, {args.events} events of {args.event_size} B, datagen -> kafka, kafka checkpoints, "
            f"median of {args.repeat} runs:"
        )
        plain = {
            key: statistics.median(r[key] for r in runs[(None, 1)])
            for key in ("events_per_s_steady", "events_per_cpu_s_steady")
        }
        for setup in setups:
            rows = runs[setup]
            wall = statistics.median(r["events_per_s_steady"] for r in rows)
            per_cpu = statistics.median(r["events_per_cpu_s_steady"] for r in rows)
            end_to_end = statistics.median(r["events_per_s_end_to_end"] for r in rows)
            wall_ratio, cpu_ratio = wall / plain["events_per_s_steady"], per_cpu / plain["events_per_cpu_s_steady"]
            print(
                f"  {rows[0]['setup']:>20}: {wall:>7.0f} ev/s steady ({wall_ratio:.2f} x plain), "
                f"{per_cpu:>7.0f} ev/CPU-s steady ({cpu_ratio:.2f} x plain), "
                f"{end_to_end:>7.0f} ev/s end to end, exits {[r['exit_codes'] for r in rows]}"
            )


if __name__ == "__main__":
    main()
