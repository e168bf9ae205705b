"""A worker group's member cut off by a real network partition (issue 24, item 5g).

The member runs in a network namespace of its own, joined to the host by a veth pair; inside it,
the broker's advertised address (127.0.0.1:9092) leads through tcp_forward over that link, so all
of the member's Kafka traffic crosses it. The test degrades the link (a token-bucket qdisc: its
queue delays what exceeds the rate and drops what overflows; this kernel has no netem) while a
third member joins, then cuts it (the host end down) for longer than the session, and restores it
once the other members own every bucket and committed the cut-off member's partitions past where
they were. With exactly_once, a read_committed reader sees every event once, no checkpoint goes
back, and the cut-off member's open transaction is the new owner's to abort: a member that cannot
reach the broker is a zombie, fenced like a frozen one.

Needs root and ``ip`` (iproute2); traffic goes only to 127.0.0.0/8 and the namespaces made here.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from connector_core.pipeline import bucket_of
from tests.integration.conftest import KAFKA_BOOTSTRAP, REPO
from tests.integration.group_helpers import Group, Member, committed_history, datagen_group_pipeline, delivered
from tests.integration.test_worker_group import PARTITIONS, for_each_coordinator

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2"),
]

SESSION_TIMEOUT_S = 6


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class IsolatedNetwork:
    """A network namespace whose 127.0.0.1:9092 reaches the broker over one veth link."""

    namespace: str
    host_end: str
    member_end: str

    @property
    def wrap(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]

    def cut(self) -> None:
        _ip("link", "set", "dev", self.host_end, "down")

    def restore(self) -> None:
        _ip("link", "set", "dev", self.host_end, "up")

    def degrade(self) -> None:
        """Both ends through a token bucket: 512 kbit/s, what waits past 200 ms dropped."""
        bucket = ["root", "tbf", "rate", "512kbit", "burst", "8kb", "latency", "200ms"]
        _tc("qdisc", "add", "dev", self.host_end, *bucket)
        _tc("-n", self.namespace, "qdisc", "add", "dev", self.member_end, *bucket)

    def heal(self) -> None:
        _tc("qdisc", "del", "dev", self.host_end, "root")
        _tc("-n", self.namespace, "qdisc", "del", "dev", self.member_end, "root")


def _tc(*args: str) -> None:
    subprocess.run(["tc", *args], check=True, capture_output=True, text=True, timeout=30)


@contextmanager
def isolated_network(tag: str) -> Iterator[IsolatedNetwork]:
    subnet = random.Random(tag).randrange(0, 256, 2) + (tag[-1] == "k")  # each coordinator its own
    host_ip, member_ip = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
    network = IsolatedNetwork(f"cdcflow-{tag}", f"cf{tag}h", f"cf{tag}n")
    broker_host, broker_port = KAFKA_BOOTSTRAP.split(":")
    relay_port = 29000 + subnet
    forwarders: list[subprocess.Popen[bytes]] = []
    _ip("netns", "add", network.namespace)
    try:
        _ip("link", "add", network.host_end, "type", "veth", "peer", "name", network.member_end)
        _ip("link", "set", network.member_end, "netns", network.namespace)
        _ip("addr", "add", f"{host_ip}/30", "dev", network.host_end)
        _ip("link", "set", network.host_end, "up")
        _ip("-n", network.namespace, "addr", "add", f"{member_ip}/30", "dev", network.member_end)
        _ip("-n", network.namespace, "link", "set", network.member_end, "up")
        _ip("-n", network.namespace, "link", "set", "lo", "up")
        forward = [sys.executable, "-m", "tests.integration.tcp_forward"]
        forwarders.append(subprocess.Popen([*forward, host_ip, str(relay_port), broker_host, broker_port], cwd=REPO))
        forwarders.append(
            subprocess.Popen([*network.wrap, *forward, broker_host, broker_port, host_ip, str(relay_port)], cwd=REPO)
        )
        yield network
    finally:
        for forwarder in forwarders:
            forwarder.kill()
            forwarder.wait()
        subprocess.run(["ip", "link", "del", network.host_end], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", network.namespace], check=False, capture_output=True)


def seen_by(member: Member, pipeline: str) -> tuple[dict[str, list[int]], dict[str, Any]]:
    """Buckets by worker port, and partitions with their owner, as ``member`` sees the group
    (nothing while its REST API is not up yet)."""
    try:
        owned = {row["worker"].rsplit(":", 1)[1]: row["buckets"] for row in member.get("/workers")["workers"]}
        partitions: dict[str, Any] = member.get(f"/pipelines/{pipeline}/status")["partitions"]
    except requests.RequestException:
        return {}, {}
    return owned, partitions


def test_a_member_cut_off_by_a_network_partition_is_fenced(  # type: ignore[no-untyped-def]
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    # 4 buckets: each holds at least one of the 8 datagen partitions (with 6, buckets 1, 2 and 5 are
    # empty, and the namespaced member, given only those, never has a partition to deliver).
    count, buckets = 30_000, 4
    assert {bucket_of(f"datagen-{i}", buckets) for i in range(PARTITIONS)} == set(range(buckets))

    def scenario(coordinator: str, prefix: str) -> None:
        folder = tmp_path / prefix
        folder.mkdir()
        offsets, pipeline = f"{prefix}-offsets", f"group-{prefix}"
        file = datagen_group_pipeline(
            folder,
            prefix,
            kafka_bootstrap,
            coordinator,
            buckets,
            f"count: {count}, partitions: {PARTITIONS}, rate: 600",
            delivery="exactly_once",
            checkpoint=f"topic: {offsets}, interval_ms: 1000, transaction_timeout_s: 60",
        )
        group = Group(file, folder)
        with isolated_network(prefix[-6:]) as network:
            try:
                cut_off = group.start("w0", wrap=network.wrap)
                host = group.start("w1")

                def owners() -> dict[str, list[int]]:
                    return seen_by(host, pipeline)[0]

                group.wait_until(
                    lambda: len([b for b in owners().values() if b]) == 2, 120, "both members to own buckets"
                )
                network.degrade()  # a rebalance over a slow and lossy link
                try:
                    joiner = group.start("w2")
                    group.wait_until(
                        lambda: len([b for b in owners().values() if b]) == 3, 120, "a rebalance to three members"
                    )
                finally:
                    network.heal()
                mine = f":{cut_off.port}"
                group.wait_until(
                    lambda: any(
                        p["owner"].endswith(mine) and p["state"] == "RUNNING"
                        for p in seen_by(host, pipeline)[1].values()
                    ),
                    60,
                    "the namespaced member to deliver",
                )
                moved = [pid for pid, p in seen_by(host, pipeline)[1].items() if p["owner"].endswith(mine)]

                network.cut()
                try:
                    at_cut = committed_history(kafka_bootstrap, pipeline, offsets)
                    others = {str(host.port), str(joiner.port)}
                    group.wait_until(
                        lambda: (
                            sorted(b for w, bs in owners().items() if w in others for b in bs) == list(range(buckets))
                        ),
                        90,
                        "the members on the host to own every bucket",
                    )
                    group.wait_until(
                        lambda: all(
                            max(committed_history(kafka_bootstrap, pipeline, offsets).get(pid, []), default=-1)
                            > max(at_cut.get(pid, []), default=-1)
                            for pid in moved
                        ),
                        60,
                        "the cut-off member's partitions to be committed past where they were",
                    )
                finally:
                    network.restore()
                for member in (cut_off, host, joiner):
                    assert group.wait_for_exit(member) == 0, member.log_text()[-3000:]
            finally:
                group.kill_all()

        cut_log = cut_off.log_text()
        assert any(sign in cut_log for sign in ("holding its writes", "no longer a member")), cut_log[-3000:]
        assert "open transaction aborted" not in cut_log, f"{coordinator}: not fenced: {cut_log[-3000:]}"
        history = committed_history(kafka_bootstrap, pipeline, offsets)
        for partition, seqs in history.items():
            assert seqs == sorted(seqs), f"{coordinator}: a checkpoint of {partition} went back: {seqs}"
        counts = delivered(kafka_bootstrap, prefix)
        assert set(counts) == set(range(count)), f"{coordinator}: {count - len(counts)} events lost"
        assert max(counts.values()) == 1, f"{coordinator}: {sum(counts.values()) - len(counts)} duplicates"
        print(f"\n{coordinator}: partitioned member's {len(moved)} partitions moved, 0 duplicates")

    for_each_coordinator(scenario, topic_prefix)
