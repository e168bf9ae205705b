"""``python benchmarks/peers.py debezium``: Debezium's Cassandra 5 connector beside cdcflow's
``cassandra_commitlog`` -> ``kafka`` on the same Cassandra node, tables and broker.

The node is one of the benchmark's own (scripts/cassandra.sh with its own address, data folder,
JMX port and cluster name, wiped at the start): Debezium deletes the segments it processed from
``cdc_raw``, which must not happen to the shared test node. Debezium runs as its documentation
says: its own JVM beside the node (``CassandraConnectorTask`` with a properties file), reading the
node's ``cassandra.yaml`` and ``cdc_raw``, ``commit.log.real.time.processing.enabled``, Kafka's
JsonConverter without schemas, the Kafka producer settings of cdcflow's kafka sink. cdcflow reads a
folder of hard links to the node's ``cdc_raw`` files, kept up to date while the node writes
(:class:`SegmentMirror`): the same bytes as Debezium, which can move the node's files away.

Three phases, each reader measured alone in the first two:
1. the orders backlog (peers.py ``commitlog``'s table): inserts, then updates and deletes of some;
2. the accounts backlog: collections (list, set and maps of decimals, text and ints), a frozen
   user type with a decimal field, a static column, TTLs, and row, range and partition deletions;
3. a live run: both readers running while orders are inserted at a fixed rate; latency from the
   write (the mutation's timestamp) to the broker appending the record (LogAppendTime topics).
Then every change on both sides is read back and compared (:mod:`debezium_compare`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import bench_topics
import debezium_compare as compare
import peers

BOOTSTRAP = "127.0.0.1:9092"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: /proc counts CPU in clock ticks and the benchmark samples it every 0.2 s: less is noise.
MIN_TIMED_CPU_S = 0.5


# --- the node ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivateNode:
    """A Cassandra node of the benchmark's own, through scripts/cassandra.sh."""

    host: str
    jmx_port: int
    cluster_name: str = "cdcflow-debezium-peer"

    @property
    def data(self) -> Path:
        return peers.DATA / "cassandra-debezium-peer"

    @property
    def cdc_raw(self) -> Path:
        return self.data / "cdc_raw"

    @property
    def config(self) -> Path:
        return self.data / "cassandra.yaml"

    def _script(self, action: str) -> None:
        env = {
            **os.environ,
            "CASSANDRA_HOST": self.host,
            "CASSANDRA_SEEDS": self.host,
            "CASSANDRA_CLUSTER_NAME": self.cluster_name,
            "CASSANDRA_JMX_PORT": str(self.jmx_port),
            "CASSANDRA_DATA_DIR": str(self.data),
        }
        subprocess.run(["bash", str(peers.REPO / "scripts" / "cassandra.sh"), action], env=env, check=True)

    def start_fresh(self) -> None:
        self._script("reset")
        self._script("start")

    def stop(self) -> None:
        self._script("stop")


class SegmentMirror(threading.Thread):
    """Keeps ``target`` holding a hard link to every file in the node's ``cdc_raw``. Cassandra
    writes a segment in place (the file in cdc_raw is a link to the commit log's own) and rewrites
    its ``_cdc.idx`` in place (``CommitLogSegment.writeCDCIndexFile`` opens it with a FileWriter),
    so a link sees every later byte. A file the node replaced (a new index after Debezium moved the
    old one away) is linked again; one cdcflow deleted from ``target`` is not."""

    def __init__(self, source: Path, target: Path, period_s: float = 0.05) -> None:
        super().__init__(name="segment-mirror", daemon=True)
        self.source, self.target, self.period_s = source, target, period_s
        self.linked: dict[str, int] = {}
        self.done = threading.Event()
        target.mkdir(parents=True, exist_ok=True)

    def run(self) -> None:
        while not self.done.wait(self.period_s):
            self.sync()

    def sync(self) -> None:
        for entry in os.scandir(self.source):
            try:
                inode = entry.inode()
                if self.linked.get(entry.name) == inode:
                    continue
                staging = self.target / f".{entry.name}.linking"  # not a name cdcflow reads
                staging.unlink(missing_ok=True)
                os.link(entry.path, staging)
                staging.replace(self.target / entry.name)
                self.linked[entry.name] = inode
            except FileNotFoundError:  # moved away by Debezium meanwhile
                continue

    def stop(self) -> None:
        self.done.set()
        self.join(5)


# --- the readers ------------------------------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (every thread of it), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Reader:
    """A connector process: started, asked whether it is ready, stopped."""

    label = ""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.log = work / "reader.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_line(self) -> str:
        raise NotImplementedError

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.work)
        return self.process

    def is_ready(self) -> bool:
        return self.ready_line() in self._log_text()

    def _log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def tail(self) -> str:
        """Its log's errors and their causes when it has any, else the log's end."""
        text = self._log_text()
        errors = [line for line in text.splitlines() if " ERROR " in line or line.startswith("Caused by")]
        return "\n".join(line[:400] for line in errors[:8]) if errors else text[-3000:]


class CdcflowWorker(Reader):
    """``cdcflow run``: cassandra_commitlog -> kafka, JSON without schemas."""

    label = "cdcflow"

    def __init__(self, work: Path, node: PrivateNode, cdc_raw: Path, cluster: str, tables: list[str], decimals: str):
        super().__init__(work)
        self.pipeline = work / "pipeline.yaml"
        source = {
            "type": "cassandra_commitlog",
            "cdc_raw": str(cdc_raw),
            "hosts": [node.host],
            "cluster": cluster,
            "tables": tables,
            "error_store": {"type": "file", "path": "errors.jsonl"},
        }
        sink = {
            "type": "kafka",
            "bootstrap_servers": BOOTSTRAP,
            "converter": {"type": "json", "schemas_enable": False, "decimal_handling": decimals},
            # Debezium's tombstones.on.delete is false by default: the same messages on both sides.
            "tombstones_on_delete": False,
        }
        self.pipeline.write_text(
            json.dumps(
                {"name": cluster, "source": source, "sink": sink, "checkpoint": {"type": "file", "path": "ckpt"}}
            )
        )

    def command(self) -> list[str]:
        return [sys.executable, "-m", "cdcflow.cli", "run", str(self.pipeline)]

    def ready_line(self) -> str:
        return " running: "


class DebeziumAgent(Reader):
    """Debezium's standalone Cassandra 5 agent (``io.debezium.connector.cassandra.CassandraConnectorTask``
    with a properties file: debezium-connector-cassandra ``cassandra-5/.../CassandraConnectorTask.java``
    ``main``), on the jars scripts/debezium.sh resolved."""

    label = "Debezium"

    def __init__(
        self,
        work: Path,
        libs: Path,
        node: PrivateNode,
        topic_prefix: str,
        decimals: str,
        producer: dict[str, str],
        poll_ms: int,
        offset_flush_ms: int,
    ):
        super().__init__(work)
        self.libs = libs
        self.properties = work / "debezium.properties"
        driver = work / "application.conf"  # the DataStax driver's own configuration file
        driver.write_text(
            "datastax-java-driver {\n"
            f'  basic.contact-points = ["{node.host}:9042"]\n'
            "  basic.load-balancing-policy.local-datacenter = datacenter1\n"
            "  basic.request.timeout = 20 seconds\n"
            "}\n"
        )
        self.logback = work / "logback.xml"
        self.logback.write_text(
            '<configuration><appender name="FILE" class="ch.qos.logback.core.FileAppender">'
            f"<file>{work / 'debezium.log'}</file><encoder><pattern>%d %-5level [%thread] %logger{{20}}: %msg%n"
            '</pattern></encoder></appender><root level="INFO"><appender-ref ref="FILE"/></root></configuration>'
        )
        self.log = work / "debezium.log"
        settings = {
            "connector.name": topic_prefix,
            "topic.prefix": topic_prefix,
            "cassandra.config": str(node.config),
            "cassandra.driver.config.file": str(driver),
            "http.port": str(_free_port()),
            "snapshot.mode": "NEVER",  # cdcflow reads no snapshot either: the commit log only
            "commit.log.relocation.dir": str(work / "relocation"),
            "commit.log.real.time.processing.enabled": "true",
            # The idle waits, as cdcflow's engine.poll_interval_ms (default 200 ms): how often an
            # idle reader looks at the segment index and at its queue.
            "commit.log.marked.complete.poll.interval.ms": str(poll_ms),
            "poll.interval.ms": str(poll_ms),
            "offset.backing.store.dir": str(work / "offsets"),
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "decimal.handling.mode": decimals,
            "varint.handling.mode": "string" if decimals == "string" else "precise",
            **{f"kafka.producer.{name}": value for name, value in producer.items()},
            "kafka.producer.bootstrap.servers": BOOTSTRAP,
        }
        if offset_flush_ms:
            # Offsets to disk as often as cdcflow checkpoints (checkpoint.interval_ms, 1 s); the
            # default 0 writes both offset files after every record.
            settings["offset.flush.interval.ms"] = str(offset_flush_ms)
            settings["max.offset.flush.size"] = str(10**9)
        self.properties.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))

    def command(self) -> list[str]:
        script = (peers.REPO / "scripts" / "cassandra.sh").read_text()
        # The JDK module flags Cassandra's classes need (conf/jvm17-clients.options), as the
        # connector's own build runs it.
        flags = script.split("java_flags=(", 1)[1].split("\n)", 1)[0].split()
        return [
            "java",
            "-Xmx1g",
            *flags,
            f"-Dlogback.configurationFile={self.logback}",
            "-cp",
            f"{self.libs}/*",
            "io.debezium.connector.cassandra.CassandraConnectorTask",
            str(self.properties),
        ]

    def ready_line(self) -> str:
        return "Starting JMX reporter"  # the last step of CassandraConnectorTaskTemplate.start

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.work / "debezium.out", "ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.work)
        return self.process


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --- Kafka ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    appended_ms: int


class Topics:
    """The benchmark's topics on the broker: their sizes, and their records read back."""

    def __init__(self, names: list[str], partitions: int = 3) -> None:
        from confluent_kafka import Consumer

        # LogAppendTime: each record says when the broker appended it.
        bench_topics.create_topics(BOOTSTRAP, names, partitions, config={"message.timestamp.type": "LogAppendTime"})
        self.partitions = partitions
        self.consumer = Consumer(
            {"bootstrap.servers": BOOTSTRAP, "group.id": f"peer-{uuid.uuid4().hex}", "enable.auto.commit": False}
        )

    def ends(self, topic: str) -> list[int]:
        from confluent_kafka import TopicPartition

        return [self.consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(self.partitions)]

    def _record_at(self, topic: str, partition: int, offset: int) -> Any:
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(topic, partition, offset)])
        while True:
            message = self.consumer.poll(10)
            if message is not None and message.error() is None:
                return message

    def appended_at(self, topic: str, partition: int, offset: int) -> int:
        return int(self._record_at(topic, partition, offset).timestamp()[1])

    def oldest_latest_write_us(self, topic: str) -> int:
        """Over the partitions, the oldest of their last records' write times (``source.ts_us``,
        both connectors' name for it): every partition has caught up to at least this."""
        latest = []
        for partition, end in enumerate(self.ends(topic)):
            if not end:
                return 0
            value = self._record_at(topic, partition, end - 1).value()
            latest.append(int(json.loads(value)["source"]["ts_us"]) if value else 0)
        return min(latest)

    def read(self, topic: str) -> list[Record]:
        from confluent_kafka import TopicPartition

        ends = self.ends(topic)
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])
        records: list[Record] = []
        positions = [0] * self.partitions
        while any(positions[p] < ends[p] for p in range(self.partitions)):
            messages: list[Any] = self.consumer.consume(5000, 1.0)
            for message in messages:
                if message.error() is not None:
                    continue
                positions[message.partition()] = message.offset() + 1
                if message.value() is not None:
                    records.append(
                        Record(message.key(), message.value(), list(message.headers() or []), message.timestamp()[1])
                    )
        return records

    def close(self) -> None:
        self.consumer.close()


# --- measuring a backlog ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    events: int
    wall_s: float  # from the process's start to the broker appending its last record
    steady_s: float  # from its first record appended to its last
    cpu_s: float  # the process's CPU until its last record was appended
    steady_cpu_s: float  # its CPU from its first record appended to its last

    def line(self, label: str) -> str:
        return (
            f"{label}: {self.events:,} rows in {self.wall_s:.1f} s: {self.events / self.wall_s:,.0f} rows/s,"
            f" {self.events / self.cpu_s:,.0f} rows per CPU-second (start-up included);"
            f" from its first record {self.events / max(self.steady_s, 1e-3):,.0f} rows/s, "
            + (
                f"{self.events / self.steady_cpu_s:,.0f} per CPU-second"
                if self.steady_cpu_s >= MIN_TIMED_CPU_S
                else "too short to time its CPU"
            )
        )


def measure_backlog(reader: Reader, topics: Topics, topic: str, expected: int, idle_s: float) -> Throughput:
    """Starts ``reader`` on a backlog of ``expected`` changes and follows ``topic`` until they are all
    there (or nothing came for ``idle_s``); the reader is left running."""
    before = topics.ends(topic)
    started = time.time()
    process = reader.start()
    samples: list[tuple[float, float]] = []
    count, changed = 0, started
    while True:
        now = time.time()
        samples.append((now, process_cpu_seconds(process.pid)))
        found = sum(topics.ends(topic)) - sum(before)
        if found != count:
            count, changed = found, now
        if count >= expected or (count and now - changed > idle_s) or process.poll() is not None:
            break
        if not count and now - started > 600:
            raise SystemExit(f"{reader.label} delivered nothing in 600 s:\n{reader.tail()}")
        time.sleep(0.2)
    if process.poll() is not None and count < expected:
        raise SystemExit(f"{reader.label} exited ({process.returncode}) after {count:,} rows:\n{reader.tail()}")
    after = topics.ends(topic)
    firsts, lasts = [], []
    for partition, (low, high) in enumerate(zip(before, after, strict=True)):
        if high > low:
            firsts.append(topics.appended_at(topic, partition, low))
            lasts.append(topics.appended_at(topic, partition, high - 1))
    first_s, last_s = min(firsts) / 1000, max(lasts) / 1000

    def cpu_at(moment: float) -> float:  # the first sample taken at or after the moment
        return next((cpu for when, cpu in samples if when >= moment), samples[-1][1])

    return Throughput(count, last_s - started, last_s - first_s, cpu_at(last_s), cpu_at(last_s) - cpu_at(first_s))


# --- workloads --------------------------------------------------------------------------------------


def write_orders_backlog(session: Any, keyspace: str, rows: int, updates: int, deletes: int) -> None:
    """peers.py's orders, then ``updates`` status changes and ``deletes`` row deletions of some."""
    from cassandra.concurrent import execute_concurrent_with_args

    keys = peers._write_orders(session, keyspace, rows)
    rng = random.Random(11)
    update = session.prepare(
        f"UPDATE {keyspace}.orders SET status = ?, updated_at = ? WHERE customer_id = ? AND order_id = ?"
    )
    moment = dt.datetime(2026, 11, 2)
    changes = [
        (rng.choice(peers._STATUSES), moment + dt.timedelta(seconds=n), *rng.choice(keys)) for n in range(updates)
    ]
    execute_concurrent_with_args(session, update, changes, concurrency=64)
    delete = session.prepare(f"DELETE FROM {keyspace}.orders WHERE customer_id = ? AND order_id = ?")
    execute_concurrent_with_args(session, delete, rng.sample(keys, deletes), concurrency=64)


ADDRESS_TYPE = "CREATE TYPE {keyspace}.address (street text, city text, zip int, deposit decimal)"
ACCOUNTS = """CREATE TABLE {keyspace}.accounts (
    account_id uuid, entry int, owner text static, balance decimal, fees list<decimal>,
    limits map<text, decimal>, tags set<text>, counts map<text, int>, address frozen<address>,
    updated_at timestamp, note text,
    PRIMARY KEY (account_id, entry)
) WITH cdc = true"""


@dataclass(frozen=True)
class Statement:
    name: str
    cql: str
    weight: int
    debezium_emits: bool  # False: Debezium makes no event of it (static columns only)
    values: Callable[[random.Random, uuid.UUID, int], tuple[Any, ...]]


def _amount(rng: random.Random) -> Decimal:
    """Decimals of every sign and of scales from -2 to 6."""
    return Decimal(rng.randrange(-(10**9), 10**9)).scaleb(-rng.randrange(-2, 7))


_TAGS = ["gold", "silver", "frozen", "vip", "audit", "eu", "us", "new"]
_CITIES = ["Lyon", "Porto", "Gent", "Bergen", "Cork"]


def _address(rng: random.Random) -> tuple[str, str, int, Decimal]:
    """An ``address`` (street, city, zip, deposit): the driver binds a user type from a tuple."""
    street = f"{rng.randrange(1, 300)} {rng.choice(['High', 'Mill', 'Quay'])} Street"
    return street, rng.choice(_CITIES), rng.randrange(1000, 99999), _amount(rng)


def account_statements(keyspace: str) -> list[Statement]:
    """The accounts workload: what each statement does, how often, and whether Debezium sees it.
    No list or map<_, decimal> element is removed: Debezium 3.4 fails on those (see docs)."""
    table = f"{keyspace}.accounts"
    row = "WHERE account_id = ? AND entry = ?"
    now = dt.datetime(2026, 11, 3)

    def row_values(
        *values: Callable[[random.Random], Any],
    ) -> Callable[[random.Random, uuid.UUID, int], tuple[Any, ...]]:
        return lambda rng, account, entry: (*(value(rng) for value in values), account, entry)

    return [
        Statement(
            "insert",
            f"INSERT INTO {table} (balance, fees, limits, tags, counts, address, updated_at, note, account_id, entry)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            30,
            True,
            row_values(
                _amount,
                lambda rng: [_amount(rng) for _ in range(rng.randrange(1, 4))],
                lambda rng: {rng.choice(_CITIES): _amount(rng) for _ in range(rng.randrange(1, 3))},
                lambda rng: set(rng.sample(_TAGS, rng.randrange(1, 4))),
                lambda rng: {rng.choice(_TAGS): rng.randrange(100) for _ in range(2)},
                _address,
                lambda rng: now + dt.timedelta(seconds=rng.randrange(86400)),
                lambda rng: rng.choice(["opened online", "branch", "migrated from v1"]),
            ),
        ),
        Statement(
            "balance",
            f"UPDATE {table} SET balance = ?, updated_at = ? {row}",
            14,
            True,
            row_values(_amount, lambda rng: now + dt.timedelta(seconds=rng.randrange(86400))),
        ),
        Statement(
            "fee appended", f"UPDATE {table} SET fees = fees + ? {row}", 6, True, row_values(lambda rng: [_amount(rng)])
        ),
        Statement(
            "limit put",
            f"UPDATE {table} SET limits[?] = ? {row}",
            6,
            True,
            row_values(lambda rng: rng.choice(_CITIES), _amount),
        ),
        Statement(
            "tag added",
            f"UPDATE {table} SET tags = tags + ? {row}",
            5,
            True,
            row_values(lambda rng: {rng.choice(_TAGS)}),
        ),
        Statement(
            "tag removed",
            f"UPDATE {table} SET tags = tags - ? {row}",
            5,
            True,
            row_values(lambda rng: {rng.choice(_TAGS)}),
        ),
        Statement(
            "count put",
            f"UPDATE {table} SET counts[?] = ? {row}",
            4,
            True,
            row_values(lambda rng: rng.choice(_TAGS), lambda rng: rng.randrange(1000)),
        ),
        Statement(
            "count removed", f"DELETE counts[?] FROM {table} {row}", 3, True, row_values(lambda rng: rng.choice(_TAGS))
        ),
        Statement("address", f"UPDATE {table} SET address = ? {row}", 4, True, row_values(_address)),
        Statement("note nulled", f"UPDATE {table} SET note = null {row}", 2, True, row_values()),
        Statement("balance deleted", f"DELETE balance FROM {table} {row}", 2, True, row_values()),
        Statement(
            "insert with TTL",
            f"INSERT INTO {table} (balance, tags, note, account_id, entry) VALUES (?, ?, ?, ?, ?) USING TTL 86400",
            4,
            True,
            lambda rng, account, entry: (_amount(rng), {rng.choice(_TAGS)}, "trial", account, entry),
        ),
        Statement(
            "owner (static)",
            f"UPDATE {table} SET owner = ? WHERE account_id = ?",
            4,
            False,
            lambda rng, account, entry: (rng.choice(["Ana", "Bo", "Cy", "Di"]), account),
        ),
        Statement("row deleted", f"DELETE FROM {table} {row}", 4, True, row_values()),
        Statement(
            "range deleted",
            f"DELETE FROM {table} WHERE account_id = ? AND entry >= ? AND entry < ?",
            2,
            True,
            lambda rng, account, entry: (account, entry, entry + rng.randrange(1, 5)),
        ),
        Statement(
            "partition deleted",
            f"DELETE FROM {table} WHERE account_id = ?",
            1,
            True,
            lambda rng, account, entry: (account,),
        ),
    ]


def write_accounts(session: Any, keyspace: str, changes: int) -> tuple[int, int, Counter[str]]:
    """Writes ``changes`` statements of the accounts workload; returns how many events each reader
    should make of them (cdcflow one per statement; Debezium none for static-only ones)."""
    from cassandra.concurrent import execute_concurrent

    statements = account_statements(keyspace)
    prepared = {s.name: session.prepare(s.cql) for s in statements}
    rng = random.Random(23)
    accounts = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(max(1, changes // 25))]
    chosen = rng.choices(statements, weights=[s.weight for s in statements], k=changes)
    work = [(prepared[s.name], s.values(rng, rng.choice(accounts), rng.randrange(16))) for s in chosen]
    for start in range(0, len(work), 2000):
        execute_concurrent(session, work[start : start + 2000], concurrency=64, raise_on_first_error=True)
    return changes, sum(1 for s in chosen if s.debezium_emits), Counter(s.name for s in chosen)


def write_live(
    session: Any, keyspace: str, rate: float, seconds: float, seed: int, enough: Callable[[], bool] = lambda: False
) -> int:
    """Inserts orders at ``rate`` rows/s for ``seconds``, or until ``enough()`` (asked once a second),
    paced (asynchronous writes, at most 256 in flight); returns how many were written."""
    insert = session.prepare(peers.INSERT_ORDER.format(keyspace=keyspace))
    rows = peers._order_rows(int(rate * seconds), seed=seed)
    pending: list[Any] = []
    started = time.monotonic()
    written = 0
    for number, row in enumerate(rows):
        pause = started + number / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        if number % max(1, int(rate)) == 0 and number and enough():
            break
        pending.append(session.execute_async(insert, row))
        written += 1
        if len(pending) >= 256:
            for future in pending:
                future.result()
            pending = []
    for future in pending:
        future.result()
    return written


# --- the run ----------------------------------------------------------------------------------------


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _await(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def _wait_synced(node: PrivateNode, settle_s: float = 3.0) -> None:
    """Until the node's segment indexes stop moving: every write so far is synced (the node syncs
    every second)."""
    last: dict[str, str] = {}
    steady_since = time.monotonic()
    while time.monotonic() - steady_since < settle_s:
        now = {p.name: p.read_text() for p in node.cdc_raw.glob("*_cdc.idx") if p.exists()}
        if now != last:
            last, steady_since = now, time.monotonic()
        time.sleep(0.25)


def _shape(session: Any, keyspace: str, table: str) -> compare.TableShape:
    cluster = session.cluster
    cluster.refresh_schema_metadata()
    meta = cluster.metadata.keyspaces[keyspace]
    columns = meta.tables[table]
    return compare.TableShape(
        keyspace,
        table,
        tuple(c.name for c in columns.partition_key),
        tuple(c.name for c in columns.clustering_key),
        {name: column.cql_type for name, column in columns.columns.items()},
        {name: dict(zip(udt.field_names, udt.field_types, strict=True)) for name, udt in meta.user_types.items()},
    )


def _changes(records: list[Record], shape: compare.TableShape, side: str) -> list[compare.Change]:
    if side == "cdcflow":
        return [compare.cdcflow_change(r.key, r.value, r.headers, r.appended_ms, shape) for r in records]
    return [compare.debezium_change(r.key, r.value, r.appended_ms, shape) for r in records]


def run(args: argparse.Namespace) -> None:
    from cdcflow.sources.cassandra_commitlog.cluster import connect

    peers._start("kafka")
    libs = Path(
        subprocess.run(
            ["bash", str(peers.REPO / "scripts" / "debezium.sh"), "install"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    node = PrivateNode(args.node_host, args.node_jmx_port)
    print(f"starting a Cassandra node of the benchmark's own on {node.host} ({node.data}) ...")
    node.start_fresh()
    tag = uuid.uuid4().hex[:8]
    keyspace = f"peer{tag}"
    ours_cluster, theirs_prefix = f"cdcflow_{tag}", f"debezium_{tag}"
    work = Path(tempfile.mkdtemp(prefix="cdcflow-peer-debezium-"))
    (work / "cdcflow").mkdir()
    (work / "debezium").mkdir()
    mirror = SegmentMirror(node.cdc_raw, node.data / "cdc_raw_cdcflow")
    cluster, session = connect([node.host])
    readers: list[Reader] = []
    topics: Topics | None = None
    try:
        session.execute(
            f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        )
        session.execute(peers._ORDERS.format(keyspace=keyspace))
        session.execute(ADDRESS_TYPE.format(keyspace=keyspace))
        session.execute(ACCOUNTS.format(keyspace=keyspace))
        shapes = {name: _shape(session, keyspace, name) for name in ("orders", "accounts")}
        names = {
            (side, table): f"{prefix}.{keyspace}.{table}"
            for side, prefix in (("cdcflow", ours_cluster), ("debezium", theirs_prefix))
            for table in shapes
        }
        topics = Topics(list(names.values()))
        mirror.start()
        ours = CdcflowWorker(
            work / "cdcflow", node, mirror.target, ours_cluster, [f"{keyspace}.{t}" for t in shapes], args.decimals
        )
        theirs = DebeziumAgent(
            work / "debezium",
            libs,
            node,
            theirs_prefix,
            args.decimals,
            peers._java_producer_settings(),
            args.poll_ms,
            args.offset_flush_ms,
        )
        readers = [ours, theirs]

        # 1. the orders backlog
        print(
            f"writing the orders backlog into {keyspace}: {args.rows:,} inserts, {args.updates:,} updates,"
            f" {args.deletes:,} deletes ..."
        )
        started = time.monotonic()
        write_orders_backlog(session, keyspace, args.rows, args.updates, args.deletes)
        _wait_synced(node)
        backlog = args.rows + args.updates + args.deletes
        segments = sorted(node.cdc_raw.glob("CommitLog-*.log"))
        size = sum(p.stat().st_size for p in segments)
        print(f"  written in {time.monotonic() - started:.0f} s: {len(segments)} segments, {size / 1e6:.0f} MB")
        results: dict[tuple[str, str], Throughput] = {}
        reader_sides: list[tuple[Reader, str]] = [(ours, "cdcflow"), (theirs, "debezium")]
        for reader, side in reader_sides:
            results[side, "orders"] = measure_backlog(reader, topics, names[side, "orders"], backlog, args.idle_s)
            reader.stop()
            print("  " + results[side, "orders"].line(_reader_name(side)) + _load())

        # 2. the accounts backlog
        print(f"writing {args.accounts:,} changes of {keyspace}.accounts (collections, a user type, decimals) ...")
        ours_expected, theirs_expected, statement_counts = write_accounts(session, keyspace, args.accounts)
        _wait_synced(node)
        print("  " + ", ".join(f"{name} {count:,}" for name, count in statement_counts.items()))
        for (reader, side), expected in zip(reader_sides, (ours_expected, theirs_expected), strict=True):
            results[side, "accounts"] = measure_backlog(reader, topics, names[side, "accounts"], expected, args.idle_s)
            reader.stop()
            print("  " + results[side, "accounts"].line(_reader_name(side)) + _load())

        # 3. live
        print(
            f"live: both readers running, orders inserted at {args.rate:,.0f} rows/s for {args.warmup_s:.0f} s"
            f" of warm-up, then {args.live_s:.0f} s measured ..."
        )
        for reader in readers:
            reader.start()
        _await(lambda: all(r.is_ready() for r in readers), 600, "both readers to start")
        # Each reader first re-reads the segment it stopped in and warms up (the JVM's JIT): the
        # latency measured is the steady state's, once both deliver what was written 3 s before.
        warmup_started = time.monotonic()

        def caught_up() -> bool:
            recent = time.time_ns() // 1000 - 3_000_000
            return time.monotonic() - warmup_started >= args.warmup_s and all(
                topics.oldest_latest_write_us(names[side, "orders"]) >= recent for side in ("cdcflow", "debezium")
            )

        warmup = write_live(session, keyspace, args.rate, 600, seed=37, enough=caught_up)
        print(f"  warm-up: {warmup:,} rows in {time.monotonic() - warmup_started:.0f} s, until both had caught up")
        live_from_us = time.time_ns() // 1000
        written = write_live(session, keyspace, args.rate, args.live_s, seed=31)
        expected_orders = backlog + warmup + written
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(
            sum(topics.ends(names[side, "orders"])) < expected_orders for side in ("cdcflow", "debezium")
        ):
            time.sleep(0.5)
        for reader in readers:
            reader.stop()

        # read back and compare
        comparisons, latencies = [], {}
        for table, shape in shapes.items():
            sides = {side: _changes(topics.read(names[side, table]), shape, side) for side in ("cdcflow", "debezium")}
            comparisons.append(compare.compare(shape, sides["cdcflow"], sides["debezium"]))
            if table == "orders":
                for side, changes in sides.items():
                    first: dict[tuple[Any, ...], compare.Change] = {}
                    for change in changes:  # a change sent twice counts once, when it first arrived
                        if change.ts_us >= live_from_us and (
                            change.match_key not in first or change.appended_ms < first[change.match_key].appended_ms
                        ):
                            first[change.match_key] = change
                    latencies[side] = [c.appended_ms - c.ts_us / 1000 for c in first.values()]
        for side in ("cdcflow", "debezium"):
            found = latencies[side]
            if found:
                print(
                    f"  {_reader_name(side)}: {len(found):,} of {written:,} rows, write -> Kafka"
                    f" p50 {_percentile(found, 0.5):,.0f} ms, p99 {_percentile(found, 0.99):,.0f} ms,"
                    f" max {max(found):,.0f} ms"
                )
            else:
                print(f"  {_reader_name(side)}: none of {written:,} rows arrived")
        _report(comparisons, args.decimals)
        ours_rate = results["cdcflow", "orders"].events / results["cdcflow", "orders"].wall_s
        theirs_rate = results["debezium", "orders"].events / results["debezium", "orders"].wall_s
        ours_cpu = results["cdcflow", "orders"].events / results["cdcflow", "orders"].cpu_s
        theirs_cpu = results["debezium", "orders"].events / results["debezium", "orders"].cpu_s
        print(f"orders backlog, rows per CPU-second: {ours_cpu / theirs_cpu:.2f}")
        peers._ratio(ours_rate, theirs_rate)
    finally:
        for reader in readers:
            reader.stop()
        mirror.stop()
        if topics is not None:
            topics.close()
        cluster.shutdown()
        if args.keep_node:
            print(f"the node runs on (scripts/cassandra.sh with CASSANDRA_DATA_DIR={node.data}); work folder: {work}")
        else:
            node.stop()
            shutil.rmtree(work, ignore_errors=True)


def _load() -> str:
    """The machine's load average: the wall-clock figures depend on what else runs."""
    return f" [load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores]"


def _reader_name(side: str) -> str:
    if side == "cdcflow":
        return f"cdcflow cassandra_commitlog -> kafka ({peers._core_name()})"
    return "Debezium 3.4.0.Final Cassandra 5 connector (JVM)"


def _report(comparisons: list[compare.Comparison], decimals: str) -> None:
    print(f"every change compared value by value (decimal.handling.mode={decimals} on both sides):")
    mismatches: list[str] = []
    for result in comparisons:
        print(
            f"  {result.table}: {result.cdcflow_events:,} cdcflow events, {result.debezium_events:,} Debezium"
            f" events, {result.paired:,} paired, {len(result.mismatches):,} mismatches"
        )
        for category, count in sorted(result.known.items()):
            print(f"    known difference, {category}: {count:,} ({compare.KNOWN_DIFFERENCES[category]})")
            print(f"      e.g. {result.known_examples[category]}")
        for side, count in sorted(result.resent.items()):
            print(f"    sent twice by {side} (the same commit-log entry again; not compared again): {count:,}")
        for category, count in sorted(result.cdcflow_only.items()):
            print(f"    only cdcflow says, {count:,} events: {compare.CDCFLOW_ONLY[category]}")
        mismatches.extend(f"{result.table}: {m}" for m in result.mismatches)
    print(f"mismatches: {len(mismatches)}")
    for mismatch in mismatches[:8]:
        print(f"  {mismatch}")
