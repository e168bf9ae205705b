"""Worker groups on the real Kafka: members that die, leave, join or freeze, and the REST API.

Every member is a ``cdcflow run`` process of the same pipeline file with its own REST port. The
assertions are on data (every datagen event arrived; duplicates within what the moved partitions
read since their last checkpoint; checkpoints that never go back) and on what the members report;
waits are bounded waits for conditions. The scenarios run for each coordinator run both groups at
once (their members mostly wait for the datagen rate), which halves their wall time. Cost: about
3 minutes of the suite on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.group_helpers import (
    Group,
    Member,
    committed_history,
    datagen_group_pipeline,
    delivered,
    group_section,
)
from tests.integration.kafka_helpers import event_id, run_cdcflow
from tests.integration.scylla_helpers import Expectations, arrived, orders_table, scylla_writer, source_section
from tests.integration.secure_kafka import make_certificates

__all__ = ["scylla_writer"]  # the fixture, for pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 8
SESSION_TIMEOUT_S = 6
MAX_RECORDS_PER_READ = 200


@pytest.fixture
def group_of(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str):  # type: ignore[no-untyped-def]
    groups: list[Group] = []

    def make(coordinator: str, buckets: int, source: str, prefix: str = topic_prefix, **options: Any) -> Group:
        folder = tmp_path / prefix
        folder.mkdir()
        file = datagen_group_pipeline(folder, prefix, kafka_bootstrap, coordinator, buckets, source, **options)
        group = Group(file, folder)
        groups.append(group)
        return group

    yield make
    for group in groups:
        group.kill_all()


def for_each_coordinator(scenario: Callable[[str, str], None], topic_prefix: str) -> None:
    """``scenario(coordinator, prefix)`` for both coordinators, side by side: two groups with their
    own topics, pipeline and group id. A failure of either fails the test (re-raised here)."""
    with ThreadPoolExecutor(2, thread_name_prefix="scenario") as pool:
        runs = [pool.submit(scenario, c, f"{topic_prefix}{c[0]}") for c in ("faust", "kafka")]
        for run in runs:
            run.result()


def mid_stream(group: Group, member_name: str) -> bool:
    """``member_name`` owns partitions and is still reading them (the kill lands mid-stream)."""
    member = group.members[member_name]
    pipeline = member.get("/")["pipelines"][0]
    partitions = member.get(f"/pipelines/{pipeline}/status")["partitions"]
    mine = [p for p in partitions.values() if p["owner"].endswith(f":{member.port}")]
    return bool(mine) and any(p["state"] == "RUNNING" and p["offset"]["seq"] > 0 for p in mine)


def a_member_mid_stream(group: Group, members: list[Member], timeout_s: float = 60) -> Member:
    """One of ``members`` that is delivering (the assignment decides which: a member whose buckets
    hold no partition has nothing to be interrupted in)."""
    found: list[Member] = []

    def one_delivers() -> bool:
        found[:] = [m for m in members if m.process.poll() is None and mid_stream(group, m.name)][:1]
        return bool(found)

    group.wait_until(one_delivers, timeout_s, "a member to deliver")
    return found[0]


def moved_partitions(group: Group, member_name: str) -> int:
    member = group.members[member_name]
    pipeline = member.get("/")["pipelines"][0]
    partitions = member.get(f"/pipelines/{pipeline}/status")["partitions"]
    return sum(1 for p in partitions.values() if p["owner"].endswith(f":{member.port}"))


def test_sigkill_one_of_three_loses_nothing(group_of, kafka_bootstrap: str, topic_prefix: str) -> None:  # type: ignore[no-untyped-def]
    count = 20_000
    group = group_of("faust", 12, f"count: {count}, partitions: {PARTITIONS}, rate: 1000")
    members = [group.start(f"w{i}") for i in range(3)]
    group.wait_until(lambda: group.owns_all(members, 12), 120, "three members to share 12 buckets")
    victim = a_member_mid_stream(group, members)
    moved = moved_partitions(group, victim.name)

    victim.signal(signal.SIGKILL)
    survivors = [m for m in members if m is not victim]
    took = group.wait_until(
        lambda: group.owns_all(survivors, 12), SESSION_TIMEOUT_S + 5, "the survivors to own every bucket"
    )
    for member in survivors:
        assert group.wait_for_exit(member) == 0, member.log_text()[-3000:]

    counts = delivered(kafka_bootstrap, topic_prefix)
    missing = set(range(count)) - set(counts)
    duplicates = sum(counts.values()) - len(counts)
    print(
        f"\nSIGKILL: survivors owned every bucket {took:.1f} s later; {moved} partitions moved, {duplicates} duplicates"
    )
    assert not missing, f"{len(missing)} events lost"
    # What the killed worker read since its last checkpoint, at most a read cycle in progress and
    # the one before the checkpoint came due, per partition it held.
    assert duplicates <= moved * 2 * MAX_RECORDS_PER_READ


def test_sigterm_and_a_joining_worker_move_partitions_without_duplicates(  # type: ignore[no-untyped-def]
    group_of, kafka_bootstrap: str, topic_prefix: str
) -> None:
    # 4 buckets, 3 workers -> 2 -> 3: ceil(4/3) == ceil(4/2), the shape in which faust's own
    # assignor leaves a rejoining worker with no bucket (faust-streaming#93). cdcflow configures
    # faust so that it does not: the joining worker must get its share.
    count, buckets = 18_000, 4

    def scenario(coordinator: str, prefix: str) -> None:
        group = group_of(coordinator, buckets, f"count: {count}, partitions: {PARTITIONS}, rate: 800", prefix)
        members = [group.start(f"w{i}") for i in range(3)]
        group.wait_until(lambda: group.owns_all(members, buckets), 120, "three members to share the buckets")
        leaving = a_member_mid_stream(group, members)

        leaving.signal(signal.SIGTERM)
        assert group.wait_for_exit(leaving, 60) == 0, leaving.log_text()[-3000:]
        survivors = [m for m in members if m is not leaving]
        group.wait_until(lambda: group.owns_all(survivors, buckets), 30, "the survivors to own every bucket")

        joiner = group.start("w3")
        everyone = [*survivors, joiner]
        group.wait_until(lambda: group.owns_all(everyone, buckets), 60, "the fourth worker to get buckets")
        assert group.ownership([joiner])["w3"], f"{coordinator}: the joining worker got no bucket (faust-streaming#93)"
        for member in everyone:
            assert group.wait_for_exit(member) == 0, member.log_text()[-3000:]

        counts = delivered(kafka_bootstrap, prefix)
        assert set(counts) == set(range(count)), f"{coordinator}: {count - len(counts)} events lost"
        assert max(counts.values()) == 1, (
            f"{coordinator}: a revoke flushes and commits before the bucket moves: no duplicates"
        )

    for_each_coordinator(scenario, topic_prefix)


def writing_uncommitted(group: Group, member: Member) -> bool:
    """``member`` has written records past its partitions' checkpoints (as its status says): with
    exactly_once, an open transaction holds them."""
    pipeline = member.get("/")["pipelines"][0]
    partitions = member.get(f"/pipelines/{pipeline}/status")["partitions"].values()
    mine = [p for p in partitions if p["owner"].endswith(f":{member.port}") and p["state"] == "RUNNING"]
    return any(p["committed_offset"] is not None and p["offset"]["seq"] > p["committed_offset"]["seq"] for p in mine)


def frozen_member_scenario(group_of, kafka_bootstrap: str, topic_prefix: str, delivery: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """SIGSTOP a member mid-stream past its session, wait until the survivor has committed each of
    its partitions past where they were (observed in the offsets topic, not slept), SIGCONT it.
    Nothing is lost, no checkpoint goes back; what the woken member does is checked by the caller
    from the duplicates (by coordinator) and its log."""
    count, buckets = 24_000, 4
    duplicates: dict[str, int] = {}

    def scenario(coordinator: str, prefix: str) -> None:
        offsets, pipeline = f"{prefix}-offsets", f"group-{prefix}"
        group = group_of(
            coordinator,
            buckets,
            f"count: {count}, partitions: {PARTITIONS}, rate: 800",
            prefix,
            delivery=delivery,
            # Longer than the freeze: only the new owner's claim can end the frozen one's transaction.
            checkpoint=f"topic: {offsets}, interval_ms: 1000, transaction_timeout_s: 60",
        )
        members = [group.start(f"w{i}") for i in range(2)]
        group.wait_until(lambda: group.owns_all(members, buckets), 120, "two members to share the buckets")
        frozen = a_member_mid_stream(group, members)
        group.wait_until(lambda: writing_uncommitted(group, frozen), 30, "the member to write past its checkpoint")
        moved = [pid for pid, p in group_status(frozen)["partitions"].items() if p["owner"].endswith(f":{frozen.port}")]
        [survivor] = [m for m in members if m is not frozen]

        frozen.signal(signal.SIGSTOP)  # frozen past its session timeout: the group expels it
        try:
            at_freeze = committed_history(kafka_bootstrap, pipeline, offsets)
            group.wait_until(lambda: group.owns_all([survivor], buckets), 60, "the survivor to take every bucket")
            group.wait_until(
                lambda: (
                    all(
                        max(seqs, default=-1) > max(at_freeze.get(pid, []), default=-1)
                        for pid, seqs in committed_history(kafka_bootstrap, pipeline, offsets).items()
                        if pid in moved
                    )
                    and set(moved) <= set(committed_history(kafka_bootstrap, pipeline, offsets))
                ),
                60,
                "the survivor to commit the frozen member's partitions past where they were",
            )
        finally:
            frozen.signal(signal.SIGCONT)
        for member in members:
            assert group.wait_for_exit(member) == 0, member.log_text()[-3000:]

        frozen_log = frozen.log_text()
        # Woken, it held its writes until the group answered, or the group's answer came first.
        stopped = ("holding its writes", "no longer a member")
        assert any(sign in frozen_log for sign in stopped), f"{coordinator}: {frozen_log[-3000:]}"
        if delivery == "exactly_once":
            # Its open transaction was the new owner's to abort: had the woken member aborted (or
            # committed) it itself, the claim would not have fenced it.
            assert "open transaction aborted" not in frozen_log, f"{coordinator}: not fenced: {frozen_log[-3000:]}"
        history = committed_history(kafka_bootstrap, pipeline, offsets)
        assert len(history) == PARTITIONS
        for partition, seqs in history.items():
            assert seqs == sorted(seqs), f"{coordinator}: a checkpoint of {partition} went back: {seqs}"
        counts = delivered(kafka_bootstrap, prefix)
        assert set(counts) == set(range(count)), f"{coordinator}: {count - len(counts)} events lost"
        duplicates[coordinator] = sum(counts.values()) - len(counts)
        print(f"\n{delivery}, {coordinator}: {len(moved)} partitions moved, {duplicates[coordinator]} duplicates")
        if delivery == "at_least_once":
            # What the frozen member had read but not committed, replayed by the survivor; the woken
            # member itself writes nothing more (before it stopped writing: thousands).
            assert duplicates[coordinator] <= len(moved) * 2 * MAX_RECORDS_PER_READ

    for_each_coordinator(scenario, topic_prefix)
    return duplicates


def group_status(member: Member) -> dict[str, Any]:
    pipeline = member.get("/")["pipelines"][0]
    answer: dict[str, Any] = member.get(f"/pipelines/{pipeline}/status")
    return answer


def test_a_frozen_worker_is_fenced_and_writes_no_more(group_of, kafka_bootstrap: str, topic_prefix: str) -> None:  # type: ignore[no-untyped-def]
    frozen_member_scenario(group_of, kafka_bootstrap, topic_prefix, "at_least_once")


def test_exactly_once_a_frozen_worker_is_fenced_and_nothing_it_wrote_is_visible(  # type: ignore[no-untyped-def]
    group_of, kafka_bootstrap: str, topic_prefix: str
) -> None:
    duplicates = frozen_member_scenario(group_of, kafka_bootstrap, topic_prefix, "exactly_once")
    assert duplicates == {"faust": 0, "kafka": 0}


def test_rest_api_status_pause_offsets_resume(group_of, kafka_bootstrap: str, topic_prefix: str) -> None:  # type: ignore[no-untyped-def]
    group = group_of("kafka", 8, f"partitions: {PARTITIONS}, rate: 400")
    members = [group.start(f"w{i}") for i in range(2)]
    group.wait_until(lambda: group.owns_all(members, 8), 120, "two members to share the buckets")
    name = f"group-{topic_prefix}"
    one, other = members[0], members[1]

    assert requests.get(one.url + "/health", timeout=10).status_code == 200
    assert "cdcflow_events_out" in requests.get(other.url + "/metrics", timeout=10).text

    def status() -> dict:  # type: ignore[type-arg]
        answer: dict = other.get(f"/pipelines/{name}/status")  # type: ignore[type-arg]
        return answer

    ports = {f":{m.port}": m.url for m in members}
    group.wait_until(lambda: len(status()["partitions"]) == PARTITIONS, 30, "every partition to have an owner")
    for partition in status()["partitions"].values():
        suffix = ":" + partition["owner"].rsplit(":", 1)[1]
        assert suffix in ports and partition["url"].endswith(suffix), partition

    # Offsets change only while paused (KIP-875's rule): a running pipeline refuses, and so does
    # the offline command while the group has members.
    refused = requests.delete(one.url + f"/pipelines/{name}/offsets?partition=datagen-0", timeout=60)
    assert refused.status_code == 409, refused.text
    offline = run_cdcflow("offsets", "reset", str(group.file), "--partition", "datagen-0")
    assert offline.returncode == 1 and "are running" in offline.stderr, offline.stderr

    assert requests.put(one.url + f"/pipelines/{name}/pause", timeout=60).status_code == 200
    group.wait_until(
        lambda: all(p["state"] == "PAUSED" for p in status()["partitions"].values()), 30, "every partition to pause"
    )
    paused_at = {pid: p["committed_offset"]["seq"] for pid, p in status()["partitions"].items()}
    time.sleep(2)  # several checkpoint intervals: nothing may move while paused
    assert {pid: p["committed_offset"]["seq"] for pid, p in status()["partitions"].items()} == paused_at

    unknown = requests.delete(one.url + f"/pipelines/{name}/offsets?partition=datagen-9", timeout=60)
    assert unknown.status_code == 400 and "datagen-9" in unknown.text
    owner_of_0 = status()["partitions"]["datagen-0"]["owner"]
    reset = run_cdcflow("offsets", "reset", name, "--partition", "datagen-0", "--url", one.url)
    assert reset.returncode == 0, reset.stderr
    offsets = one.get(f"/pipelines/{name}/offsets")["partitions"]
    assert "datagen-0" not in offsets or offsets["datagen-0"]["offset"]["seq"] < paused_at["datagen-0"]
    assert offsets["datagen-1"]["offset"]["seq"] == paused_at["datagen-1"]
    assert status()["partitions"]["datagen-0"]["owner"] == owner_of_0

    shown = run_cdcflow("status", name, "--url", other.url)
    assert shown.returncode == 0 and '"PAUSED"' in shown.stdout, shown.stderr
    assert run_cdcflow("resume", name, "--url", other.url).returncode == 0
    since = {**paused_at, "datagen-0": 0}  # datagen-0 restarted from its beginning
    group.wait_until(
        lambda: all(
            p["committed_offset"] is not None and p["committed_offset"]["seq"] > since[pid]
            for pid, p in status()["partitions"].items()
        ),
        30,
        "every partition to move on",
    )
    for member in members:
        member.signal(signal.SIGTERM)
    for member in members:
        assert group.wait_for_exit(member, 60) == 0, member.log_text()[-3000:]
    with pytest.raises(requests.ConnectionError):
        requests.get(one.url + "/health", timeout=5)
    # The group stopped: the offline command changes offsets, through the bucket's claim.
    offline = run_cdcflow("offsets", "reset", str(group.file), "--partition", "datagen-1")
    assert offline.returncode == 0, offline.stderr
    shown = json.loads(run_cdcflow("offsets", "show", str(group.file)).stdout)["partitions"]
    assert "datagen-1" not in shown and "datagen-2" in shown


def test_scylla_cdc_split_across_two_workers_one_killed(  # type: ignore[no-untyped-def]
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, keyspace: str, scylla_writer
) -> None:
    writer = scylla_writer
    table = orders_table(writer, keyspace, vnodes=8)  # 8 stream groups: the pipeline's partitions
    expected = Expectations(writer)
    source = {**source_section(writer, [table], confidence_window_ms=2000), "cluster": topic_prefix}
    file = tmp_path / "scylla-group.yaml"
    file.write_text(
        f"name: scylla-{topic_prefix}\n"
        f"source: {json.dumps(source)}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', linger_ms: 10}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', interval_ms: 300}}\n"
        "engine:\n  partition_refresh_ms: 500\n  poll_interval_ms: 100\n  max_records_per_read: 40\n"
        f"  group: {group_section(kafka_bootstrap, f'grp-{topic_prefix}', 'faust', 8)}\n"
    )
    group = Group(file, tmp_path)
    try:
        members = [group.start(f"w{i}") for i in range(2)]
        group.wait_until(lambda: group.owns_all(members, 8), 120, "two members to share the buckets")
        done = threading.Event()
        switches: list[int] = []

        def write() -> None:
            for i in range(1200):
                expected.write(table, "c", {"id": i}, {"total": i})
                if i == 400:
                    switches.append(writer.join_node(vnodes=4))  # a new generation: new partitions
                time.sleep(0.004)
            done.set()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        group.wait_until(lambda: mid_scylla(group, "w1"), 60, "w1 to deliver its partitions")
        members[1].signal(signal.SIGKILL)
        group.wait_until(lambda: group.owns_all([members[0]], 8), SESSION_TIMEOUT_S + 5, "w0 to own every bucket")
        thread.join()
        group.wait_until(
            lambda: not expected.missing(arrived(kafka_bootstrap, topic_prefix)), 120, "every write to arrive"
        )
        members[0].signal(signal.SIGTERM)
        assert group.wait_for_exit(members[0], 60) == 0, members[0].log_text()[-3000:]
    finally:
        group.kill_all()
    events = arrived(kafka_bootstrap, topic_prefix)
    expected.check(events)
    assert switches and any(e.ts_us >= switches[0] for e in events)
    assert len({e.source_partition for e in events}) > 8  # both generations' stream groups


def mid_scylla(group: Group, member_name: str) -> bool:
    member = group.members[member_name]
    pipeline = member.get("/")["pipelines"][0]
    partitions = member.get(f"/pipelines/{pipeline}/status")["partitions"]
    mine = [p for p in partitions.values() if p["owner"].endswith(f":{member.port}")]
    return any(p["committed_offset"] is not None for p in mine)


def test_a_group_on_a_sasl_ssl_broker(tmp_path: Path, secure_kafka, topic_prefix: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The engine.group kafka block reaches both Kafka clients of a member: faust's (aiokafka:
    SCRAM over TLS with a client certificate) and confluent-kafka's (the control topic)."""
    from tests.integration.secure_kafka import PASSWORD

    monkeypatch.setenv("KAFKA_PASSWORD", PASSWORD)
    broker, count = secure_kafka, 4000
    client = broker.client_block()
    file = tmp_path / "secure-group.yaml"
    file.write_text(
        f"name: group-{topic_prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: 4, tables: 2, event_size: 16, rate: 1000}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{broker.sasl_ssl}', kafka: {client}}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{broker.sasl_ssl}', kafka: {client}}}\n"
        "engine:\n"
        f"  group: {{coordinator: faust, bootstrap_servers: '{broker.sasl_ssl}', kafka: {client}, "
        f'id: grp-{topic_prefix}, buckets: 4, session_timeout_s: 6, rest: {{port: "${{REST_PORT:-8083}}"}}}}\n'
    )
    group = Group(file, tmp_path)
    try:
        member = group.start("w0")
        group.wait_until(lambda: group.owns_all([member], 4), 120, "the member to own every bucket")
        assert group.wait_for_exit(member) == 0, member.log_text()[-3000:]
    finally:
        group.kill_all()
    received = read_topics_with(broker.librdkafka(), topic_prefix)
    assert sorted(received) == list(range(count))


def read_topics_with(settings: dict, prefix: str) -> list[int]:  # type: ignore[type-arg]
    """Event ids in the pipeline's topics, read over the secure listener."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({**settings, "group.id": "cdcflow-tests", "enable.partition.eof": True})
    try:
        topics = [t for t in consumer.list_topics(timeout=30).topics if t.startswith(prefix + ".")]
        parts = [
            TopicPartition(t, n, 0) for t in topics for n in consumer.list_topics(t, timeout=30).topics[t].partitions
        ]
        consumer.assign(parts)
        remaining, ids = {(p.topic, p.partition) for p in parts}, []
        while remaining:
            message = consumer.poll(30)
            assert message is not None, "the secure broker stopped answering"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                remaining.discard((message.topic(), message.partition()))
            elif message.value() is not None:
                ids.append(event_id(json.loads(message.value())["payload"]))
        return ids
    finally:
        consumer.close()


VIEWER_PASSWORD, OPERATOR_TOKEN = "Viewer-Password-41", "Operator-Token-0123456789"


@dataclass
class SecuredMember:
    """A member whose REST API takes HTTPS, a viewer (ann) and an operator token (ci), both read
    from a secret file (${file:PATH:KEY}), answering /health."""

    group: Group
    member: Member
    pipeline: str
    url: str
    ca: str


def start_a_secured_member(tmp_path: Path, bootstrap: str, prefix: str, coordinator: str) -> SecuredMember:
    tls = tmp_path / "tls"
    make_certificates(tls)  # broker.pem: the member's key and certificate for 127.0.0.1
    (tmp_path / "rest-secrets.properties").write_text(f"ann = {VIEWER_PASSWORD}\nci-token = {OPERATOR_TOKEN}\n")
    name = f"group-{prefix}"
    group_block = group_section(bootstrap, f"grp-{prefix}", coordinator, 4).replace(
        'rest: {port: "${REST_PORT:-8083}"}',
        'rest: {port: "${REST_PORT:-8083}", tls: {certfile: tls/broker.pem}, '
        "auth: {users: {ann: {password: '${file:rest-secrets.properties:ann}', role: viewer}}, "
        "tokens: {ci: {token: '${file:rest-secrets.properties:ci-token}', role: operator}}}}",
    )
    assert "auth:" in group_block
    file = tmp_path / "group.yaml"
    file.write_text(
        f"name: {name}\n"
        "source: {type: datagen, partitions: 2, tables: 1, keys: 100, event_size: 16, rate: 50}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: 10}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{bootstrap}', interval_ms: 500}}\n"
        f"engine:\n  group: {group_block}\n"
    )
    group = Group(file, tmp_path)
    member = group.start("w0")
    secured = SecuredMember(group, member, name, f"https://127.0.0.1:{member.port}", str(tls / "ca.pem"))

    def healthy() -> bool:
        if member.process.poll() is not None:
            pytest.fail(f"the member exited:\n{member.log_text()[-3000:]}")
        try:
            return requests.get(secured.url + "/health", verify=secured.ca, timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    try:
        group.wait_until(healthy, 120, "the member to answer /health over HTTPS without credentials")
    except BaseException:
        group.kill_all()
        raise
    return secured


def assert_the_bar(secured: SecuredMember) -> None:
    """401 without credentials or with wrong ones, 200 with them; /health answered all along."""
    url, ca = secured.url, secured.ca
    without = requests.get(url + "/pipelines", verify=ca, timeout=10)
    assert without.status_code == 401, without.text
    wrong = requests.get(url + "/pipelines", verify=ca, auth=("ann", VIEWER_PASSWORD + "!"), timeout=10)
    assert wrong.status_code == 401, wrong.text
    viewer = requests.get(url + "/pipelines", verify=ca, auth=("ann", VIEWER_PASSWORD), timeout=10)
    assert viewer.status_code == 200 and viewer.json() == [secured.pipeline]
    refused = requests.put(
        url + f"/pipelines/{secured.pipeline}/pause", verify=ca, auth=("ann", VIEWER_PASSWORD), timeout=60
    )
    assert refused.status_code == 403, refused.text
    with pytest.raises(requests.ConnectionError):
        requests.get(secured.member.url + "/health", timeout=5)  # plain HTTP gets no answer


def test_rest_api_with_tls_and_credentials(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    """Issue 27's bar: a member with rest.auth.users answers 401 without credentials, 200 with
    them, and /health without; over HTTPS, a viewer may read and not pause, an operator (a token)
    may; the CLI passes --user/--token/--cacert; no password or token reaches the member's log."""
    secured = start_a_secured_member(tmp_path, kafka_bootstrap, topic_prefix, "kafka")
    group, member, name, url, ca = secured.group, secured.member, secured.pipeline, secured.url, secured.ca
    viewer_password, operator_token = VIEWER_PASSWORD, OPERATOR_TOKEN
    try:
        assert_the_bar(secured)

        def cdcflow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "cdcflow.cli", *args, "--url", url, "--cacert", ca],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, **env},
            )

        def states(**credentials: Any) -> set[str]:
            shown = requests.get(url + f"/pipelines/{name}/status", verify=ca, timeout=10, **credentials).json()
            return {p["state"] for p in shown["partitions"].values()}

        paused = cdcflow("pause", name, CDCFLOW_REST_TOKEN=operator_token)
        assert paused.returncode == 0, paused.stderr + member.log_text()[-3000:]
        group.wait_until(lambda: states(auth=("ann", viewer_password)) == {"PAUSED"}, 30, "the pipeline to pause")
        shown = cdcflow("status", name, "--user", "ann", CDCFLOW_REST_PASSWORD=viewer_password)
        assert shown.returncode == 0 and '"PAUSED"' in shown.stdout, shown.stderr
        as_viewer = cdcflow("resume", name, "--user", "ann", CDCFLOW_REST_PASSWORD=viewer_password)
        assert as_viewer.returncode == 1 and "403" in as_viewer.stderr, as_viewer.stderr
        unauthenticated = cdcflow("resume", name)
        assert unauthenticated.returncode == 1 and "401" in unauthenticated.stderr, unauthenticated.stderr
        assert cdcflow("resume", name, "--token", operator_token).returncode == 0
        group.wait_until(
            lambda: states(headers={"Authorization": f"Bearer {operator_token}"}) == {"RUNNING"}, 30, "a resume"
        )
        member.signal(signal.SIGTERM)
        assert group.wait_for_exit(member, 60) == 0, member.log_text()[-3000:]
        log = member.log_text()
        assert "REST at https://" in log
        assert viewer_password not in log and operator_token not in log
    finally:
        group.kill_all()


def test_a_faust_members_rest_api_is_guarded_too(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    """The faust coordinator serves the REST API from its own app (with Kafka), built apart from
    the kafka coordinator's web-only one: the bar holds there too."""
    secured = start_a_secured_member(tmp_path, kafka_bootstrap, topic_prefix, "faust")
    try:
        assert_the_bar(secured)
    finally:
        secured.group.kill_all()
