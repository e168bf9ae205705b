"""ScyllaDB's CDC on the real Cassandra node: the writer from the seed, what it wrote, what arrived.

ScyllaDB cannot run here. :class:`ScyllaCdcWriter` writes ScyllaDB's CDC metadata and log tables
into keyspaces of the real node; :class:`Expectations` records every base write, so a test can
check that each one reached Kafka with its content, op and the stream the design puts it in, in
per-stream order. :class:`DesignStreams` says which stream that is from the seed's rules and the
metadata tables as written, never from the writer's own functions.
"""

from __future__ import annotations

import bisect
import datetime
import json
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_helpers import read_topics, topics_with_prefix
from tests.standins.scylla.writer import ScyllaCdcWriter, SimulatedKeyspaces


@pytest.fixture
def scylla_writer(cassandra_session: Any, keyspace: str) -> Iterator[ScyllaCdcWriter]:
    """A writer whose simulated system keyspaces are named after the test's keyspace, with a short
    ring delay (a joining node's generation starts 2 s later) and a 2 s generation leeway."""
    writer = ScyllaCdcWriter(
        cassandra_session,
        SimulatedKeyspaces.prefixed(keyspace),
        shards=4,
        ring_delay_s=1.0,
        generation_leeway_us=2_000_000,
        seed=hash(keyspace) & 0xFFFF,
    )
    writer.create_metadata_tables()
    yield writer
    writer.drop_keyspaces()


def orders_table(writer: ScyllaCdcWriter, keyspace: str, vnodes: int = 4) -> str:
    """A cluster of one node with ``vnodes`` vnodes and a table ``orders (id int, total int)``."""
    writer.bootstrap(vnodes=vnodes)
    writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int")])
    return f"{keyspace}.orders"


def source_section(writer: ScyllaCdcWriter, tables: list[str], **overrides: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "type": "scylla_cdc",
        "hosts": ["127.0.0.1"],
        "cluster": "scy",
        "tables": tables,
        "confidence_window_ms": 3000,
        # The stand-in applies a write before it answers, and these tests write with the coordinator's
        # clock: the confidence window need not cover ScyllaDB's 2 s write timeout and 5 s generation
        # leeway (issue 22, item 5), which would only slow them down.
        "cluster_write_timeout_ms": 500,
        "generation_leeway_ms": 500,
        "poll_interval_ms": 200,
        "metadata_refresh_ms": 300,
        "generations_keyspace": writer.keyspaces.distributed,
        "tablets_keyspace": writer.keyspaces.local,
        "schema_keyspace": writer.keyspaces.schema,  # each table's cdc options: its log TTL, delta mode
    }
    section.update(overrides)
    return section


def pipeline(
    folder: Path, prefix: str, bootstrap: str, source: dict[str, Any], engine: str = "", linger_ms: int = 10
) -> Path:
    """A worker pipeline into the real Kafka, topics ``<prefix>.<keyspace>.<table>``."""
    file = folder / "scylla.yaml"
    file.write_text(
        f"name: scylla-{prefix}\n"
        f"source: {json.dumps({**source, 'cluster': prefix})}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: {linger_ms}}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
        f"engine: {{partition_refresh_ms: 500, poll_interval_ms: 100{engine}}}\n"
    )
    return file


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, process: subprocess.Popen[bytes] | None
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process is not None and process.poll() is not None:
            pytest.fail(f"the worker exited with {process.returncode} before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


@dataclass(frozen=True)
class Arrived:
    """One event as Kafka holds it."""

    topic: str
    kafka_partition: int
    offset: int
    table: str
    op: str
    key: dict[str, Any]
    after: dict[str, Any] | None
    before: dict[str, Any] | None
    ts_us: int
    stream: str
    source_partition: str
    headers: dict[str, bytes]
    ts_ms: int = 0  # when cdcflow made this copy

    @property
    def identity(self) -> tuple[str, str, int, str]:
        return (self.table, json.dumps(self.key, sort_keys=True), self.ts_us, self.op)


def arrived(bootstrap: str, prefix: str) -> list[Arrived]:
    found = []
    for record in read_topics(bootstrap, topics_with_prefix(bootstrap, prefix + ".")):
        if record.value is None:
            continue
        payload = json.loads(record.value)["payload"]
        source = payload["source"]
        position = json.loads(source["position"])
        key = json.loads(record.key)["payload"] if record.key else {}
        found.append(
            Arrived(
                record.topic,
                record.partition,
                record.offset,
                source["table"],
                payload["op"],
                key,
                payload["after"],
                payload["before"],
                source["ts_us"],
                position["stream"],
                source["partition"],
                record.headers,
                payload["ts_ms"],
            )
        )
    return found


def _micros(value: datetime.datetime) -> int:
    aware = value.replace(tzinfo=datetime.UTC) if value.tzinfo is None else value
    return (aware - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(microseconds=1)


def seed_shard_of(token: int, shards: int, ignore_msb: int) -> int:
    """Seed 000, "The generation's mapping": the shard owning ``token`` on a node of ``shards``
    shards: the unbiased token without its ``ignore_msb`` highest bits, as a fraction of the
    ring, times the shard count."""
    unbiased = token + (1 << 63)
    kept = (unbiased << ignore_msb) % (1 << 64)
    return (kept * shards) >> 64


class DesignStreams:
    """The stream a base write must be logged in, from the design (seeds 000 and 004) applied to
    the metadata tables the stand-in wrote, read here over CQL, and the partition key's token as
    the driver's Murmur3 partitioner computes it:

    * vnodes: the generation operating at the write (the newest in ``cdc_generation_timestamps`` at
      or before it); its range ``(end[i-1], end[i]]`` holding the token (past the last end: the
      first range); in the range's streams, the one whose token is owned by the same shard as the
      write's token ("we chose streams[j] so that its token is owned by the jth shard"), shards
      counted by the range's streams, ``ignore_msb`` from ``cdc_generation_descriptions_v2``;
    * tablets: the stream set of ``system.cdc_streams`` operating at the write; its stream whose
      token (its tablet's last token) is the first at or past the write's token.
    """

    def __init__(self, session: Any, keyspaces: Any) -> None:
        self.session = session
        self.keyspaces = keyspaces
        self._vnodes: list[tuple[int, list[tuple[int, list[bytes]]]]] | None = None
        self._ignore_msb: int | None = None

    def token(self, table: str, partition_key: dict[str, Any]) -> int:
        from cassandra.metadata import Murmur3Token

        names = list(partition_key)
        prepared = self.session.prepare(f"SELECT * FROM {table} WHERE " + " AND ".join(f"{n} = ?" for n in names))
        return int(Murmur3Token.from_key(prepared.bind([partition_key[n] for n in names]).routing_key).value)

    def _generations(self) -> list[tuple[int, list[tuple[int, list[bytes]]]]]:
        if self._vnodes is None:
            distributed = self.keyspaces.distributed
            times = sorted(
                _micros(row[0])
                for row in self.session.execute(
                    f"SELECT time FROM {distributed}.cdc_generation_timestamps WHERE key = 'timestamps'"
                )
            )
            self._vnodes = []
            for timestamp in times:
                rows = self.session.execute(
                    f"SELECT range_end, streams FROM {distributed}.cdc_streams_descriptions_v2 WHERE time = %s",
                    (timestamp // 1000,),
                )
                self._vnodes.append((timestamp, sorted((end, sorted(streams)) for end, streams in rows)))
            found = list(
                self.session.execute(
                    f"SELECT ignore_msb FROM {self.keyspaces.everywhere}.cdc_generation_descriptions_v2 LIMIT 1"
                )
            )
            self._ignore_msb = int(found[0][0]) if found else 0
        return self._vnodes

    def vnode_stream(self, ts_us: int, token: int) -> bytes:
        generations = self._generations()
        index = bisect.bisect_right([t for t, _ in generations], ts_us) - 1
        assert index >= 0, f"no generation operates at {ts_us}"
        ranges = generations[index][1]
        _, streams = next(((end, s) for end, s in ranges if token <= end), ranges[0])
        assert self._ignore_msb is not None
        shard = seed_shard_of(token, len(streams), self._ignore_msb)
        owned = [
            s
            for s in streams
            if seed_shard_of(int.from_bytes(s[:8], "big", signed=True), len(streams), self._ignore_msb) == shard
        ]
        assert len(owned) == 1, (
            f"token {token}: streams {[s.hex() for s in streams]} give shard {shard} {len(owned)} times"
        )
        return owned[0]

    def tablet_stream(self, table: str, ts_us: int, token: int) -> bytes:
        keyspace, name = table.split(".")
        rows = self.session.execute(
            f"SELECT timestamp, stream_id FROM {self.keyspaces.local}.cdc_streams "
            "WHERE keyspace_name = %s AND table_name = %s AND stream_state = 0 ALLOW FILTERING",
            (keyspace, name),
        )
        sets: dict[int, list[bytes]] = {}
        for timestamp, stream in rows:
            sets.setdefault(_micros(timestamp), []).append(stream)
        operating = max(t for t in sets if t <= ts_us)
        by_token = sorted(sets[operating], key=lambda s: int.from_bytes(s[:8], "big", signed=True))
        return next(s for s in by_token if int.from_bytes(s[:8], "big", signed=True) >= token)

    def stream(self, table: str, ts_us: int, partition_key: dict[str, Any]) -> bytes:
        keyspace, name = table.split(".")
        tablet = list(
            self.session.execute(
                f"SELECT timestamp FROM {self.keyspaces.local}.cdc_timestamps "
                "WHERE keyspace_name = %s AND table_name = %s LIMIT 1",
                (keyspace, name),
            )
        )
        token = self.token(table, partition_key)
        return self.tablet_stream(table, ts_us, token) if tablet else self.vnode_stream(ts_us, token)


@dataclass
class Expectations:
    """Every base write made through :meth:`write`, with its stream and the event it must become."""

    writer: ScyllaCdcWriter
    written: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(
        self,
        table: str,
        op: str,
        key: dict[str, Any],
        values: dict[str, Any] | None = None,
        timestamp_us: int | None = None,
    ) -> int:
        """``op``: c (insert key + values), u (update values), d (row delete)."""
        if op == "c":
            stamp = self.writer.insert(table, {**key, **(values or {})}, timestamp_us=timestamp_us)
        elif op == "u":
            stamp = self.writer.update(table, key, values or {}, timestamp_us=timestamp_us)
        else:
            stamp = self.writer.delete_row(table, key, timestamp_us=timestamp_us)
        partition_key = {n: key[n] for n in self.writer.partition_key_names(table)}
        after = None if op == "d" else {**key, **(values or {})}
        if after is not None and self.writer.logs_post_images(table):
            # the post-image is the whole row (the tests insert fresh rows: absent columns are null)
            after = {**dict.fromkeys(self.writer.value_columns(table)), **after}
        with self.lock:
            self.written.append(
                {"table": table, "op": op, "key": key, "after": after, "ts_us": stamp, "partition_key": partition_key}
            )
        return stamp

    def identities(self) -> set[tuple[str, str, int, str]]:
        with self.lock:
            return {
                (w["table"].split(".")[1], json.dumps(w["key"], sort_keys=True), w["ts_us"], w["op"])
                for w in self.written
            }

    def missing(self, events: list[Arrived]) -> set[tuple[str, str, int, str]]:
        return self.identities() - {e.identity for e in events}

    def check(self, events: list[Arrived], exactly_once: bool = False) -> None:
        """Every write arrived with its op, content and stream; per key, first arrivals keep write
        order; with ``exactly_once`` (no crash) nothing arrived twice."""
        assert not self.missing(events), f"{len(self.missing(events))} writes never arrived"
        by_identity: dict[tuple[str, str, int, str], list[Arrived]] = defaultdict(list)
        for event in events:
            by_identity[event.identity].append(event)
        with self.lock:
            written = list(self.written)
        design = DesignStreams(self.writer.session, self.writer.keyspaces)
        for write in written:
            write["stream"] = design.stream(write["table"], write["ts_us"], write["partition_key"]).hex()
            identity = (
                write["table"].split(".")[1],
                json.dumps(write["key"], sort_keys=True),
                write["ts_us"],
                write["op"],
            )
            first = by_identity[identity][0]
            assert first.after == write["after"], (write, first)
            assert first.stream == write["stream"], (write, first)
            if exactly_once:
                assert len(by_identity[identity]) == 1, f"{identity} arrived {len(by_identity[identity])} times"
        assert_first_arrivals_in_write_order(events)


def assert_first_arrivals_in_write_order(events: list[Arrived]) -> None:
    """Within a Kafka partition, a key's events first arrive in the order of their timestamps
    (a replay after a crash repeats older events after newer ones: those are not first arrivals)."""
    seen: set[tuple[str, str, int, str]] = set()
    last: dict[tuple[str, int, str], int] = {}
    for event in sorted(events, key=lambda e: (e.topic, e.kafka_partition, e.offset)):
        if event.identity in seen:
            continue
        seen.add(event.identity)
        where = (event.topic, event.kafka_partition, json.dumps(event.key, sort_keys=True))
        assert event.ts_us >= last.get(where, -1), f"{where} went back to {event.ts_us} from {last[where]}"
        last[where] = event.ts_us
