"""cdcflow side by side with its peers, one run each: cdcflow's figure, the peer's, and as the last
line ``ratio: X.XX`` (cdcflow ÷ peer, higher is better). Each starts the services it needs.

    python benchmarks/peers.py commitlog [--rows 200000] [--rounds 5]
        Cassandra commit-log segments a real 5.0 node wrote (a realistic orders table), parsed to
        row changes with every value decoded: cdcflow vs Cassandra's own CommitLogReader (what
        Debezium reads cdc_raw with) in a Java harness (benchmarks/java), after JIT warm-up.
    python benchmarks/peers.py kafka [--events 200000] [--event-size 1500]
        datagen -> Kafka (avro) vs a plain confluent-kafka Producer loop sending pre-built values of
        the same size with the same producer settings (per CPU-second of each process), and vs
        Kafka's ProducerPerformance (JVM, from the Kafka jars) at the same size and settings.
    python benchmarks/peers.py spark [--events 100000]
        kafka -> parquet on the spark engine vs a plain Spark Structured Streaming job reading the
        same topic with Spark's Kafka connector, from_json, writing Parquet.
    python benchmarks/peers.py delta [--events 30000] [--keys 2000]
        kafka -> the delta sink's mirror on the spark engine vs a plain Structured Streaming job
        doing foreachBatch + MERGE by hand on the same topic (what a user writes today): each
        micro-batch deduplicated by key, then MERGE (delete, update all, insert all).
    python benchmarks/peers.py debezium [--rows 200000] [--accounts 20000] [--rate 500]
        cassandra_commitlog -> kafka vs Debezium's Cassandra 5 connector (JVM, from Maven Central
        by scripts/debezium.sh) on a Cassandra node of the benchmark's own, the same tables and
        broker: an orders backlog, a backlog with collections, a user type and decimals, a live
        run with write -> Kafka latency; every change compared (benchmarks/debezium_peer.py).

``--core python`` runs cdcflow's pure-Python core instead of the compiled one (CDCFLOW_PURE_PYTHON).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import bench_topics

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow"))
DATA = Path(os.environ.get("CDCFLOW_DATA", CACHE / "run"))
BUILD = REPO / "build" / "peers"


def _ratio(ours: float, peer: float) -> None:
    print(f"ratio: {ours / peer:.2f}")


def _start(*services: str) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "services.sh"), "start", *services], check=True)


def _version(pom: str, tag: str) -> str:
    text = (REPO / "scripts" / "maven" / pom / "pom.xml").read_text()
    return text.split(f"<{tag}>", 1)[1].split("</", 1)[0]


def _javac(source: Path, classpath: str) -> Path:
    """``source`` compiled into build/peers/classes (again only when it changed)."""
    classes = BUILD / "classes"
    target = classes / (source.stem + ".class")
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(source)], check=True)
    return classes


# --- commit log ------------------------------------------------------------------------------------

_ORDERS = """CREATE TABLE {keyspace}.orders (
    customer_id uuid, order_id timeuuid, status text, currency text, total decimal, items int,
    express boolean, created_at timestamp, updated_at timestamp, note text,
    PRIMARY KEY (customer_id, order_id)
) WITH cdc = true"""

_STATUSES = ["placed", "paid", "packed", "shipped", "delivered", "returned"]


def _order_rows(rows: int, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """The orders' rows, in the column order of ``INSERT_ORDER``."""
    import datetime as dt
    import random
    from decimal import Decimal

    rng = random.Random(seed)
    customers = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rows // 20 + 1)]
    words = ["express", "gift", "wrap", "please", "leave", "at", "the", "door", "call", "before", "delivery"]
    now = dt.datetime(2026, 11, 1)
    for number in range(rows):
        created = now + dt.timedelta(seconds=number)
        yield (
            rng.choice(customers),
            uuid.uuid1(),
            rng.choice(_STATUSES),
            rng.choice(["EUR", "USD", "GBP"]),
            Decimal(rng.randrange(100, 10_000_000)).scaleb(-2),
            rng.randrange(1, 20),
            rng.random() < 0.2,
            created,
            created + dt.timedelta(minutes=rng.randrange(0, 600)),
            " ".join(rng.choices(words, k=rng.randrange(6, 16))),
        )


INSERT_ORDER = (
    "INSERT INTO {keyspace}.orders (customer_id, order_id, status, currency, total, items, express,"
    " created_at, updated_at, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _write_orders(session: Any, keyspace: str, rows: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Writes ``rows`` orders; returns their primary keys."""
    from cassandra.concurrent import execute_concurrent_with_args

    insert = session.prepare(INSERT_ORDER.format(keyspace=keyspace))
    keys: list[tuple[uuid.UUID, uuid.UUID]] = []
    batch = []
    for row in _order_rows(rows):
        batch.append(row)
        keys.append((row[0], row[1]))
        if len(batch) == 2000:
            execute_concurrent_with_args(session, insert, batch, concurrency=64)
            batch = []
    if batch:
        execute_concurrent_with_args(session, insert, batch, concurrency=64)
    return keys


def _table_rows(data: bytes, path: Path, catalog: Any, table_id: str) -> int:
    """How many row changes of the table a segment holds (with the reference reader: counting is
    not what is measured)."""
    from cdcflow.sources.cassandra_commitlog.changes import row_changes
    from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
    from cdcflow.sources.cassandra_commitlog.segment import Entry, read_entries

    decoder = MutationDecoder(catalog, 7, lambda t: t.table_id == table_id)
    count = 0
    for entry in read_entries(data, path):
        if isinstance(entry, Entry):
            try:
                count += sum(len(list(row_changes(u))) for u in decoder.decode(entry.mutation).updates)
            except Exception:  # other tests' tables, unknown to this schema
                continue
    return count


def _segments_with_table(cdc_raw: Path, catalog: Any, table_id: str, rows: int, timeout_s: float) -> list[Path]:
    """The cdc_raw segments holding the table's mutations, once all ``rows`` are synced into them."""
    deadline = time.monotonic() + timeout_s
    counted: dict[Path, int] = {}
    while True:
        for path in sorted(cdc_raw.glob("CommitLog-*.log")):
            index = path.with_name(path.stem + "_cdc.idx")
            if path in counted and "COMPLETED" in (index.read_text() if index.exists() else ""):
                continue  # closed: its count is final
            try:
                count = _table_rows(path.read_bytes(), path, catalog, table_id)
            except Exception:  # a segment allocated but not written yet, or removed
                continue
            if count:
                counted[path] = count
        total = sum(counted.values())
        if total >= rows or time.monotonic() > deadline:
            print(f"  {total:,} of {rows:,} rows synced into {len(counted)} segments")
            return sorted(counted)
        time.sleep(1.0)


def _native() -> Any:
    from cdcflow.native import native_module

    native = native_module()
    if native is None:
        raise SystemExit("the compiled core is not built (scripts/setup.sh with cargo on the PATH)")
    return native


def _dropped_tables(segments: list[Path], catalog: Any) -> set[str]:
    """The ids of tables the segments hold mutations of that the schema does not know (other
    tests' tables, dropped before the schema was saved): the source learns them on its first read
    and skips their mutations after (as the JVM reader skips unknown tables); not measured."""
    from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError, UnknownTableError
    from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
    from cdcflow.sources.cassandra_commitlog.segment import Entry, read_entries

    decoder, dropped = MutationDecoder(catalog, 7, lambda t: False), set()
    for path in segments:
        for entry in read_entries(path.read_bytes(), path):
            if isinstance(entry, Entry):
                try:
                    decoder.decode(entry.mutation)
                except UnknownTableError as exc:
                    dropped.add(exc.table_id)
                except CommitLogError:
                    continue
    return dropped


class _Parse(NamedTuple):
    """One way cdcflow reads the segments: medians (and spreads) over the measured rounds."""

    mb_s: float
    mb_cpu_s: float
    spread: str  # "min-max" MB per CPU-second over the rounds
    changes: int
    by_record: int  # compact: segments holding an entry compact batches do not carry, read by record


def _records_pass(data: bytes, path: Path, catalog: Any, wanted: Any, native: Any) -> int:
    """Row changes as ``RowChange`` objects (what ``read`` makes events of), every value decoded."""
    from cdcflow.sources.cassandra_commitlog.changes import row_changes
    from cdcflow.sources.cassandra_commitlog.compiled import CompiledDecoder, CompiledFramer
    from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
    from cdcflow.sources.cassandra_commitlog.segment import Entry, read_entries, read_framed

    changes = 0
    if native is not None:
        decoder = CompiledDecoder(catalog, wanted, native)
        for item in read_framed(data, path, CompiledFramer(native, 0, lambda d=decoder: d)):  # type: ignore[misc]
            for _, _, row_changes_of_update in item.changes or ():
                changes += len(row_changes_of_update)
        return changes
    reference = MutationDecoder(catalog, 7, wanted)
    for entry in read_entries(data, path):
        if isinstance(entry, Entry):
            for update in reference.decode(entry.mutation).updates:
                changes += len(list(row_changes(update)))
    return changes


def _compact_pass(
    data: bytes, path: Path, segment_id: int, catalog: Any, wanted: Any, native: Any, dropped: set[str]
) -> tuple[int, bool]:
    """Row changes in compact batches of 2,000 (what ``read_event_batches`` hands the Kafka sink),
    every value decoded and held by the compiled core; a segment with an entry they do not carry
    is read by record instead, as the source reads such a range. (changes, read by record)."""
    from cdcflow.sources.cassandra_commitlog.compiled import CompactInto, CompiledDecoder, CompiledFramer
    from cdcflow.sources.cassandra_commitlog.segment import read_framed

    builder = native.CompactBatchBuilder()
    decoder = CompiledDecoder(catalog, wanted, native, dropped)
    framer = CompiledFramer(native, 0, lambda: decoder, compact=CompactInto(builder, segment_id))
    changes = 0
    for section in read_framed(data, path, framer):
        if section.refused is not None:
            return _records_pass(data, path, catalog, wanted, native), True
        while len(builder) >= 2000:
            changes += len(builder.take("node", 0, 2000))
    return changes + len(builder.take("node", 0, None)), False


def _cdcflow_parse(segments: list[Path], catalog: Any, table_id: str, rounds: int, compact: bool) -> _Parse:
    """Median MB/s (wall-clock, and per CPU-second) of reading the segments to row changes with
    every value decoded, as the source does: in compact batches, or as ``RowChange`` objects."""
    from cdcflow.native import native_module
    from cdcflow.processes import tune_for_the_loop

    tune_for_the_loop()  # as a worker process does
    native = native_module()
    wanted = lambda table: table.table_id == table_id  # noqa: E731
    dropped = _dropped_tables(segments, catalog) if compact else set()
    size = sum(p.stat().st_size for p in segments)
    speeds, cpu_speeds, changes, by_record = [], [], 0, 0
    for round_number in range(rounds + 1):  # the first round warms up (rounds=0: one pass, no figures)
        changes = by_record = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        for segment_id, path in enumerate(segments):
            data = path.read_bytes()
            if compact:
                found, read_by_record = _compact_pass(data, path, segment_id, catalog, wanted, native, dropped)
                changes, by_record = changes + found, by_record + read_by_record
            else:
                changes += _records_pass(data, path, catalog, wanted, native)
        if round_number:
            speeds.append(size / 1e6 / (time.perf_counter() - started))
            cpu_speeds.append(size / 1e6 / (time.process_time() - cpu_started))
    if not speeds:
        return _Parse(0.0, 0.0, "", changes, by_record)
    spread = f"{min(cpu_speeds):.1f}-{max(cpu_speeds):.1f}"
    return _Parse(statistics.median(speeds), statistics.median(cpu_speeds), spread, changes, by_record)


def _java_peer(
    segments: list[Path], keyspace: str, table_id: str, cql: str, types: list[str], warmups: int, rounds: int
) -> tuple[float, float, int]:
    libs = CACHE / f"cassandra-{_version('cassandra', 'cassandra.version')}" / "libs"
    classpath = f"{libs}/*"
    classes = _javac(REPO / "benchmarks" / "java" / "CommitLogReaderPeer.java", classpath)
    work = Path(tempfile.mkdtemp(prefix="cdcflow-peer-cassandra-"))
    config = work / "cassandra.yaml"
    config.write_text(
        "cluster_name: peer\npartitioner: org.apache.cassandra.dht.Murmur3Partitioner\n"
        f"commitlog_directory: {work}/commitlog\ndata_file_directories: [{work}/data]\n"
        f"saved_caches_directory: {work}/saved_caches\nhints_directory: {work}/hints\n"
        "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms\nendpoint_snitch: SimpleSnitch\n"
        "seed_provider:\n  - class_name: org.apache.cassandra.locator.SimpleSeedProvider\n"
        "    parameters:\n      - seeds: 127.0.0.1:7000\n"
    )
    # Cassandra's own Java 17 module flags, as scripts/cassandra.sh starts the node with them.
    script = (REPO / "scripts" / "cassandra.sh").read_text()
    flags = script.split("java_flags=(", 1)[1].split("\n)", 1)[0].split()
    command = [
        "java",
        "-Xmx1g",
        *flags,
        f"-Dcassandra.storagedir={work}",
        "-Dlogback.configurationFile=" + str(_quiet_logback(work)),
        "-cp",
        f"{classes}:{classpath}",
        "CommitLogReaderPeer",
        str(config),
        keyspace,
        table_id,
        cql,
        ";".join(types),
        str(warmups),
        str(rounds),
        *map(str, segments),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    shutil.rmtree(work, ignore_errors=True)
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("round ")]
    if result.returncode != 0 or not lines:
        output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        raise SystemExit(f"the Java peer failed ({result.returncode}):\n{output}")
    speeds = [int(line[3]) / 1e6 / float(line[5]) for line in lines]
    cpu_speeds = [int(line[3]) / 1e6 / float(line[15]) for line in lines]
    return statistics.median(speeds), statistics.median(cpu_speeds), int(lines[-1][9])


def _quiet_logback(work: Path) -> Path:
    path = work / "logback.xml"
    path.write_text('<configuration><root level="ERROR"/></configuration>')
    return path


def _write_segments(rows: int, into: Path, table_name: str = "orders") -> None:
    """Writes ``rows`` changes of ``table_name`` on the node (orders: inserts; accounts: the
    collections, user type and decimals workload of benchmarks/debezium_peer.py) and saves the
    segments holding them, with the schema (``schema.json``) and the table (``table.json``:
    keyspace, id, CQL, its user types' CQL), into ``into``."""
    import debezium_peer  # beside this file

    from cdcflow.sources.cassandra_commitlog.cluster import connect
    from cdcflow.sources.cassandra_commitlog.schema import load_schema_catalog

    _start("cassandra")
    cdc_raw = DATA / "cassandra" / "cdc_raw"
    cluster, session = connect(["127.0.0.1"])
    keyspace = f"peer{uuid.uuid4().hex[:8]}"
    try:
        session.execute(
            f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        )
        types = [debezium_peer.ADDRESS_TYPE.format(keyspace=keyspace)] if table_name == "accounts" else []
        cql = (debezium_peer.ACCOUNTS if table_name == "accounts" else _ORDERS).format(keyspace=keyspace)
        for statement in [*types, cql]:
            session.execute(statement)
        print(f"writing {rows:,} changes into {keyspace}.{table_name} on the Cassandra node ...")
        started = time.monotonic()
        if table_name == "accounts":
            rows = debezium_peer.write_accounts(session, keyspace, rows)[0]  # row changes made
        else:
            _write_orders(session, keyspace, rows)
        print(f"  written in {time.monotonic() - started:.0f} s")
        catalog = load_schema_catalog(session)
        table = catalog.by_name(keyspace, table_name)
        assert table is not None
        into.mkdir(parents=True, exist_ok=True)
        # Copies: the node (and other readers of cdc_raw) may remove segments while this runs.
        for path in _segments_with_table(cdc_raw, catalog, table.table_id, rows, timeout_s=300):
            shutil.copy(path, into / path.name)
        catalog.save(into / "schema.json")
        description = {"keyspace": keyspace, "id": table.table_id, "cql": cql, "types": types}
        (into / "table.json").write_text(json.dumps(description))
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        cluster.shutdown()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _soak(segments: list[Path], catalog: Any, table_id: str, seconds: float) -> None:
    """Parses the segments over and over for ``seconds``, printing RSS as it goes: memory must stay flat."""
    started, samples, passes, changes = time.monotonic(), [], 0, 0
    next_sample = started
    compact = _native_module() is not None
    while time.monotonic() - started < seconds:
        found = _cdcflow_parse(segments, catalog, table_id, rounds=0, compact=compact).changes
        passes, changes = passes + 1, changes + found
        if time.monotonic() >= next_sample:
            samples.append((time.monotonic() - started, _rss_mb()))
            next_sample += seconds / 20
    samples.append((time.monotonic() - started, _rss_mb()))
    print(f"soak: {passes} passes, {changes:,} row changes in {seconds:.0f} s ({_core_name()})")
    print("rss over time (s, MB): " + ", ".join(f"({t:.0f}, {m:.0f})" for t, m in samples))
    first, last = samples[1][1] if len(samples) > 1 else samples[0][1], samples[-1][1]
    print(f"rss growth after the first pass: {last - first:+.1f} MB")


def commitlog(args: argparse.Namespace) -> None:
    from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog

    folder = args.segments or Path(tempfile.mkdtemp(prefix="cdcflow-peer-commitlog-"))
    if not (folder / "table.json").exists():
        _write_segments(args.rows, folder, args.table)
    segments = sorted(folder.glob("CommitLog-*.log"))
    catalog = SchemaCatalog.load(folder / "schema.json")
    table = json.loads((folder / "table.json").read_text())
    if args.soak:
        _soak(segments, catalog, table["id"], args.soak)
        return
    size = sum(p.stat().st_size for p in segments)
    print(f"segments: {len(segments)} files, {size / 1e6:.1f} MB (load average {os.getloadavg()[0]:.1f})")
    # Compact batches are what the source hands the Kafka sink; RowChange objects what read()
    # makes events of (a range compact batches do not carry, the pure-Python core).
    compact = _native_module() is not None
    ours = _cdcflow_parse(segments, catalog, table["id"], args.rounds, compact)
    kind = "compact batches" if compact else "row changes"
    print(
        f"cdcflow {kind} ({_core_name()}): {ours.mb_s:7.1f} MB/s, {ours.mb_cpu_s:7.1f} MB per CPU-second"
        f" (rounds {ours.spread})  ({ours.changes:,} row changes, every value decoded"
        + (f"; {ours.by_record} of {len(segments)} segments read by record" if compact else "")
        + ")"
    )
    objects = _cdcflow_parse(segments, catalog, table["id"], args.rounds, False) if compact else ours
    if compact:
        print(
            f"cdcflow RowChange objects: {objects.mb_s:7.1f} MB/s, {objects.mb_cpu_s:7.1f} MB per CPU-second"
            f" (rounds {objects.spread})  ({objects.changes:,} row changes as Python objects)"
        )
    peer, peer_cpu, rows = _java_peer(
        segments, table["keyspace"], table["id"], table["cql"], table.get("types", []), args.warmups, args.rounds
    )
    print(
        f"Cassandra CommitLogReader (JVM): {peer:7.1f} MB/s, {peer_cpu:7.1f} MB per CPU-second"
        f"  ({rows:,} rows, every value composed)"
    )
    print(
        f"per CPU-second: {ours.mb_cpu_s / peer_cpu:.2f}"
        + (f" (RowChange objects {objects.mb_cpu_s / peer_cpu:.2f})" if compact else "")
        + f"  (medians of {args.rounds} rounds; wall-clock below)"
    )
    if args.segments is None:
        shutil.rmtree(folder, ignore_errors=True)
    _ratio(ours.mb_s, peer)


# --- Kafka ------------------------------------------------------------------------------------------

_BOOTSTRAP = "127.0.0.1:9092"
_REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"  # Apicurio (scripts/schema_registry.sh)


def _create_topics(topics: list[str], partitions: int = 3) -> None:
    bench_topics.create_topics(_BOOTSTRAP, topics, partitions)


def _sink_settings() -> dict[str, Any]:
    """The kafka sink's own producer settings (idempotent, acks=all, one request in flight, lz4...)."""
    from cdcflow.contract import PluginContext
    from cdcflow.plugins import PluginRegistry
    from cdcflow.sinks.kafka.sink import KafkaSink, KafkaSinkConfig

    context = PluginContext("peer", Path("peer.yaml"), factory=PluginRegistry.from_entry_points())
    config = KafkaSinkConfig.model_validate({"type": "kafka", "bootstrap_servers": _BOOTSTRAP})
    # The settings take the delivery callback of the lane producing with them; the peers need none
    # (the sink's reports only failures: delivery.report.only.error).
    settings: dict[str, Any] = KafkaSink(config, context)._settings(None)
    del settings["on_delivery"]
    return settings


def _java_producer_settings() -> dict[str, str]:
    """The kafka sink's producer settings in the Java client's names, for the JVM peers; batches as
    large as librdkafka's (its batch.size default, 1,000,000 bytes, against Java's 16 KB)."""
    settings = _sink_settings()
    return {
        "acks": str(settings["acks"]),
        "enable.idempotence": str(settings["enable.idempotence"]).lower(),
        "max.in.flight.requests.per.connection": str(settings["max.in.flight.requests.per.connection"]),
        "compression.type": str(settings["compression.type"]),
        "linger.ms": str(settings["linger.ms"]),
        "batch.size": "1000000",
        "buffer.memory": str(int(settings["queue.buffering.max.kbytes"]) * 1024),
    }


def _kafka_cdcflow(args: argparse.Namespace) -> None:
    """Child process: datagen -> kafka (avro) as `cdcflow run` runs it; prints its figures as JSON
    and saves sample (key, value) pairs it produced for the peers to send."""
    from confluent_kafka import Consumer

    from cdcflow.config import load_pipeline
    from cdcflow.metrics import METRICS_REGISTRY
    from cdcflow.pipeline import build_runner
    from cdcflow.plugins import PluginRegistry
    from cdcflow.processes import tune_for_the_loop

    prefix = args.prefix
    folder = Path(tempfile.mkdtemp(prefix="cdcflow-peer-kafka-"))
    file = folder / "p.yaml"
    file.write_text(
        f"name: {prefix}\n"
        f"source: {{type: datagen, count: {args.events}, partitions: 4, tables: 3, event_size: {args.event_size}}}\n"
        f'transforms: [{{type: route, regex: "(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{_BOOTSTRAP}', converter: avro,"
        f" schema_registry_url: '{_REGISTRY}'}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 1000}\n"
    )
    registry = PluginRegistry.from_entry_points()
    runner = build_runner(load_pipeline(file, registry), registry)
    tune_for_the_loop()  # as `cdcflow run` does
    wall, cpu = time.perf_counter(), time.process_time()
    runner.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    delivered = int(METRICS_REGISTRY.get_sample_value("cdcflow_events_out_total", {"pipeline": prefix}) or 0)
    consumer = Consumer({"bootstrap.servers": _BOOTSTRAP, "group.id": prefix, "auto.offset.reset": "earliest"})
    consumer.subscribe([f"{prefix}.datagen.shop.table_{i}" for i in range(3)])
    samples: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    while len(samples) < args.samples and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=1.0):
            if message.error() is None and message.value():
                samples.append((message.key() or b"", message.value()))
    consumer.close()
    with open(args.samples_file, "wb") as out:
        for key, value in samples:
            out.write(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"events": delivered, "wall_s": wall, "cpu_s": cpu}))


def _read_samples(path: Path) -> list[tuple[bytes, bytes]]:
    data, samples, at = path.read_bytes(), [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        key = data[at + 4 : at + 4 + size]
        at += 4 + size
        size = int.from_bytes(data[at : at + 4], "big")
        samples.append((key, data[at + 4 : at + 4 + size]))
        at += 4 + size
    return samples


def _kafka_loop(args: argparse.Namespace) -> None:
    """Child process: a plain confluent-kafka Producer loop sending the pre-built samples with the
    sink's settings, polling as the sink does; prints its figures as JSON."""
    from confluent_kafka import Producer

    samples = _read_samples(Path(args.samples_file))
    topics = [f"{args.prefix}.loop_{i}" for i in range(3)]
    producer = Producer(_sink_settings())
    wall, cpu = time.perf_counter(), time.process_time()
    for number in range(args.events):
        key, value = samples[number % len(samples)]
        while True:
            try:
                producer.produce(topics[number % 3], value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
        if number % 1000 == 999:
            producer.poll(0)
    while producer.flush(1.0) > 0:
        pass
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"events": args.events, "wall_s": wall, "cpu_s": cpu}))


def _child(args: list[str]) -> dict[str, Any]:
    result = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def _producer_performance(prefix: str, events: int, samples: list[tuple[bytes, bytes]]) -> tuple[float, float]:
    """Kafka's ProducerPerformance (JVM) with the sink's settings and librdkafka's batch size,
    sending the samples' values (bytes outside printable ASCII replaced: it reads payloads as
    text lines; sizes and compressibility stay). Returns (records/s, records per CPU-second)."""
    import resource

    libs = CACHE / f"kafka-{_version('kafka', 'kafka.version')}" / "libs"
    topic = f"{prefix}.perf"
    _create_topics([topic])
    payloads = Path(tempfile.mkdtemp(prefix="cdcflow-peer-perf-")) / "payloads.txt"
    printable = bytes(b if 0x20 <= b < 0x7F else ord("x") for b in range(256))
    payloads.write_bytes(b"\n".join(value.translate(printable) for _, value in samples))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [
            "java",
            "-Xmx1g",
            "-cp",
            f"{libs}/*",
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(events),
            "--throughput",
            "-1",
            "--payload-file",
            str(payloads),
            "--producer-props",
            f"bootstrap.servers={_BOOTSTRAP}",
            *(f"{name}={value}" for name, value in _java_producer_settings().items()),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(payloads.parent, ignore_errors=True)
    final = [line for line in result.stdout.splitlines() if "records sent" in line]
    if result.returncode != 0 or not final:
        raise SystemExit(f"ProducerPerformance failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    per_second = float(final[-1].split("records sent,")[1].split("records/sec")[0])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return per_second, events / cpu


def kafka(args: argparse.Namespace) -> None:
    _start("kafka", "registry")
    prefix = f"peer{uuid.uuid4().hex[:8]}"
    _create_topics([f"{prefix}.datagen.shop.table_{i}" for i in range(3)] + [f"{prefix}.loop_{i}" for i in range(3)])
    samples_file = Path(tempfile.mkdtemp(prefix="cdcflow-peer-samples-")) / "samples.bin"
    # The children inherit CDCFLOW_PURE_PYTHON (--core python).
    common = ["--events", str(args.events), "--prefix", prefix, "--samples-file", str(samples_file)]
    ours = _child(["_kafka_cdcflow", *common, "--event-size", str(args.event_size)])
    samples = _read_samples(samples_file)
    size = statistics.mean(len(value) for _, value in samples)
    ours_rate, ours_cpu = ours["events"] / ours["wall_s"], ours["events"] / ours["cpu_s"]
    print(
        f"cdcflow datagen -> kafka, avro ({_core_name()}): {ours_rate:9,.0f} events/s,"
        f" {ours_cpu:9,.0f} events per CPU-second  ({ours['events']:,} events, values {size:,.0f} B on average)"
    )
    loop = _child(["_kafka_loop", *common])
    loop_rate, loop_cpu = loop["events"] / loop["wall_s"], loop["events"] / loop["cpu_s"]
    print(
        f"plain confluent-kafka Producer loop, pre-built values: {loop_rate:9,.0f} events/s,"
        f" {loop_cpu:9,.0f} events per CPU-second"
    )
    perf_rate, perf_cpu = _producer_performance(prefix, args.events, samples)
    print(
        f"Kafka ProducerPerformance (JVM), same size and settings: {perf_rate:9,.0f} events/s,"
        f" {perf_cpu:9,.0f} events per CPU-second (JVM start-up and JIT included)"
    )
    shutil.rmtree(samples_file.parent, ignore_errors=True)
    print(f"vs the Producer loop, per CPU-second: {ours_cpu / loop_cpu:.2f}  (aim >= 0.5)")
    print(f"vs ProducerPerformance, events/s: {ours_rate / perf_rate:.2f}  (aim >= 1.0)")
    if args.against == "loop":
        _ratio(ours_cpu, loop_cpu)
    else:
        _ratio(ours_rate, perf_rate)


# --- Spark ------------------------------------------------------------------------------------------

_DATAGEN_ROW = "id bigint, seq bigint, name string, amount double, payload string, updated_at_us bigint"
_ENVELOPE = (
    f"op string, before struct<{_DATAGEN_ROW}>, after struct<{_DATAGEN_ROW}>, source struct<version string,"
    " connector string, name string, keyspace string, table string, partition string, position string,"
    " ts_us bigint, ts_ms bigint, snapshot boolean>, ts_ms bigint"
)
_BATCH_LINE = re.compile(r"batch (\d+): (\d+) events in (\d+) ms")


def _parquet_rows(out: Path) -> int:
    import pyarrow.dataset as ds

    try:
        return int(ds.dataset(out, format="parquet", partitioning="hive", ignore_prefixes=["_", "."]).count_rows())
    except Exception:  # files renamed into place while listed, or none yet
        return 0


def _spark_plain(args: argparse.Namespace) -> None:
    """Child process: the plain Spark Structured Streaming job (Spark's Kafka connector, from_json,
    Parquet), the same rows out as cdcflow's parquet sink; prints its figures as JSON."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom

    from cdcflow.spark_engine.session import spark_session

    started = time.monotonic()
    session = spark_session("plain-spark-peer", args.master, {})
    stream = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", _BOOTSTRAP)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.per_trigger))
        .load()
    )
    event = F.from_json(F.col("value").cast("string"), _ENVELOPE).alias("e")
    rows = stream.select(event).select(
        F.col("e.op").alias("op"),
        F.col("e.ts_ms").alias("ts_ms"),
        F.col("e.source.ts_us").alias("source_ts_us"),
        F.col("e.source.partition").alias("source_partition"),
        F.col("e.source.position").alias("source_position"),
        F.col("e.source.snapshot").alias("snapshot"),
        F.coalesce(F.col("e.after"), F.col("e.before")).alias("row"),
    )
    rows = rows.select("*", "row.*", F.to_date(F.timestamp_micros(F.col("source_ts_us"))).alias("event_date")).drop(
        "row"
    )
    query = (
        rows.writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy("event_date")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.monotonic() - started
    batches = [(p["numInputRows"], p["durationMs"].get("triggerExecution", 0)) for p in query.recentProgress]
    batches = [b for b in batches if b[0] > 0]
    session.stop()
    print(json.dumps({"wall_s": wall, "batches": batches}))


def _steady(batches: list[tuple[int, int]]) -> float:
    """Events/s over every batch but the first (which pays for the start-up), as Spark times them."""
    steady = batches[1:] or batches
    events, millis = sum(e for e, _ in steady), sum(ms for _, ms in steady)
    return events / (millis / 1000) if millis else 0.0


def _tree_rss_mb(root: int) -> dict[str, float]:
    """RSS of a process and its descendants, in MB, summed by program (python, java)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    rss: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        parents[pid] = int(fields.get("PPid", "0").strip())
        names[pid] = fields.get("Name", "?").strip()
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024 if "VmRSS" in fields else 0.0
    totals: dict[str, float] = {}
    for pid, size in rss.items():
        ancestor = pid
        while ancestor not in (0, 1, root) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            totals[names[pid]] = totals.get(names[pid], 0.0) + size
    return totals


def _spark_soak(args: argparse.Namespace, topic: str, work: Path) -> None:
    """kafka -> parquet on Spark for ``args.soak`` seconds while datagen -> kafka feeds the topic at
    ``args.rate`` events/s; RSS of the cdcflow process tree (driver JVM and Python workers) as it goes."""
    json_converter = "{type: json, schemas_enable: false}"
    feed = work / "feed.yaml"
    feed.write_text(
        f"name: {topic}-feed\n"
        f"source: {{type: datagen, rate: {args.rate}, partitions: 4, tables: 1, event_size: {args.event_size}}}\n"
        f'transforms: [{{type: route, regex: "(.*)", replacement: "{topic}"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{_BOOTSTRAP}', converter: {json_converter}}}\n"
        "checkpoint: {type: file, path: feed-ckpt}\n"
    )
    feeder = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(feed)], stderr=subprocess.DEVNULL)
    pipeline = work / "to-parquet.yaml"
    process = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(pipeline), "--log-level", "WARNING"], stderr=subprocess.DEVNULL
    )
    samples = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.soak and process.poll() is None:
            time.sleep(args.soak / 20)
            totals = _tree_rss_mb(process.pid)
            samples.append(
                (time.monotonic() - started, totals.get("python3", 0) + totals.get("python", 0), totals.get("java", 0))
            )
    finally:
        for running in (process, feeder):
            running.send_signal(signal.SIGTERM)
        process.wait(300)
        feeder.wait(120)
    rows = _parquet_rows(work / "out")
    print(f"soak: {rows:,} rows written in {args.soak:.0f} s at {args.rate:,.0f} events/s offered ({_core_name()})")
    print(
        "rss over time (s, Python processes MB, JVM MB): "
        + ", ".join(f"({t:.0f}, {p:.0f}, {j:.0f})" for t, p, j in samples)
    )


def spark(args: argparse.Namespace) -> None:
    _start("kafka")
    prefix = f"peer{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.events"
    _create_topics([topic], partitions=4)
    work = Path(tempfile.mkdtemp(prefix="cdcflow-peer-spark-"))
    json_converter = "{type: json, schemas_enable: false}"
    fill = work / "fill.yaml"
    fill.write_text(
        f"name: {prefix}-fill\n"
        f"source: {{type: datagen, count: {args.events}, partitions: 4, tables: 1, event_size: {args.event_size}}}\n"
        f'transforms: [{{type: route, regex: "(.*)", replacement: "{topic}"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{_BOOTSTRAP}', converter: {json_converter}}}\n"
        f"checkpoint: {{type: file, path: fill-ckpt}}\n"
    )
    if not args.soak:
        subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", str(fill)], check=True, capture_output=True)
    if not args.soak:
        print(f"{args.events:,} events in {topic} (cdcflow json envelopes, datagen payloads of {args.event_size} B)")
    # Both jobs' micro-batches hold per_batch records: cdcflow's kafka source hands
    # max_records_per_batch to Spark's connector as maxOffsetsPerTrigger, as the plain job sets it.
    per_trigger = args.per_batch

    pipeline = work / "to-parquet.yaml"
    pipeline.write_text(
        f"name: {prefix}-parquet\n"
        f"source: {{type: kafka, bootstrap_servers: '{_BOOTSTRAP}', topics: ['{topic}'],"
        f" converter: {json_converter}, max_records_per_batch: {args.per_batch}}}\n"
        "sink: {type: parquet, path: out}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        f"engine: {{type: spark, master: '{args.master}', trigger_interval_ms: 0,"
        f" max_records_per_read: {args.per_batch}}}\n"
    )
    if args.soak:
        _spark_soak(args, topic, work)
        shutil.rmtree(work, ignore_errors=True)
        return
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(pipeline), "--log-level", "INFO"],
        stderr=subprocess.PIPE,
        text=True,
    )
    while _parquet_rows(work / "out") < args.events and process.poll() is None:
        time.sleep(0.5)
    ours_wall = time.monotonic() - started
    process.send_signal(signal.SIGTERM)
    _, log_text = process.communicate(timeout=300)
    written = _parquet_rows(work / "out")
    batches = [(int(e), int(ms)) for _, e, ms in _BATCH_LINE.findall(log_text)]
    ours_steady = _steady(batches)
    print(
        f"cdcflow kafka -> parquet (spark engine, {args.master}, {_core_name()}):"
        f" {args.events / ours_wall:8,.0f} events/s"
        f" end to end, {ours_steady:8,.0f} events/s steady  ({written:,} rows, {len(batches)} batches)"
    )
    peer = _child(
        [
            "_spark_plain",
            "--topic",
            topic,
            "--out",
            str(work / "plain"),
            "--checkpoint",
            str(work / "plain-ckpt"),
            "--master",
            args.master,
            "--per-trigger",
            str(per_trigger),
        ]
    )
    peer_steady = _steady([tuple(b) for b in peer["batches"]])
    print(
        f"plain Spark job (Kafka connector, from_json, Parquet): {args.events / peer['wall_s']:8,.0f} events/s"
        f" end to end, {peer_steady:8,.0f} events/s steady  ({_parquet_rows(work / 'plain'):,} rows,"
        f" {len(peer['batches'])} batches)"
    )
    print(f"end to end (Spark start-up included): {(args.events / ours_wall) / (args.events / peer['wall_s']):.2f}")
    shutil.rmtree(work, ignore_errors=True)
    _ratio(ours_steady, peer_steady)


def _delta_plain(args: argparse.Namespace) -> None:
    """Child process: a plain Structured Streaming job mirroring the topic into Delta by hand:
    Spark's Kafka connector, from_json, and in foreachBatch each key's last change (max_by over
    the source time) then one MERGE: delete, update all, insert all. Prints its figures as JSON."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom

    from cdcflow.sinks.delta_spark import DELTA_SESSION_CONF
    from cdcflow.spark_engine.session import spark_session

    started = time.monotonic()
    session = spark_session("plain-delta-peer", args.master, DELTA_SESSION_CONF)
    session.sql(
        f"CREATE TABLE delta.`{args.out}` ({_DATAGEN_ROW}) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    stream = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", _BOOTSTRAP)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.per_trigger))
        .load()
    )
    event = F.from_json(F.col("value").cast("string"), _ENVELOPE).alias("e")
    changes = stream.select(event).select(
        F.col("e.op").alias("op"),
        F.col("e.source.ts_us").alias("ts_us"),
        F.coalesce(F.col("e.after"), F.col("e.before")).alias("row"),
    )

    def merge(batch: Any, batch_id: int) -> None:
        last = batch.groupBy(F.col("row.id").alias("key")).agg(
            F.max_by(F.struct("op", "row"), F.col("ts_us")).alias("last")
        )
        last.select("last.op", "last.row.*").createOrReplaceTempView("changes")
        batch.sparkSession.sql(
            f"MERGE INTO delta.`{args.out}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET * "
            "WHEN NOT MATCHED AND s.op != 'd' THEN INSERT *"
        )

    query = (
        changes.writeStream.foreachBatch(merge)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.monotonic() - started
    batches = [(p["numInputRows"], p["durationMs"].get("triggerExecution", 0)) for p in query.recentProgress]
    batches = [b for b in batches if b[0] > 0]
    rows = session.read.format("delta").load(args.out).count()
    session.stop()
    print(json.dumps({"wall_s": wall, "batches": batches, "rows": rows}))


def _delta_rows(table: Path) -> int:
    from deltalake import DeltaTable, QueryBuilder

    found = DeltaTable(str(table))
    return int(QueryBuilder().register("t", found).execute("SELECT count(*) AS n FROM t").read_all()["n"][0].as_py())


def delta(args: argparse.Namespace) -> None:
    _start("kafka")
    prefix = f"peer{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.events"
    _create_topics([topic], partitions=4)
    work = Path(tempfile.mkdtemp(prefix="cdcflow-peer-delta-"))
    json_converter = "{type: json, schemas_enable: false}"
    fill = work / "fill.yaml"
    fill.write_text(
        f"name: {prefix}-fill\n"
        f"source: {{type: datagen, count: {args.events}, keys: {args.keys}, partitions: 4, tables: 1,"
        f" event_size: {args.event_size}}}\n"
        f'transforms: [{{type: route, regex: "(.*)", replacement: "{topic}"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{_BOOTSTRAP}', converter: {json_converter}}}\n"
        "checkpoint: {type: file, path: fill-ckpt}\n"
    )
    subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", str(fill)], check=True, capture_output=True)
    print(f"{args.events:,} changes over {args.keys:,} keys in {topic} (cdcflow json envelopes)")
    pipeline = work / "to-delta.yaml"
    pipeline.write_text(
        f"name: {prefix}-delta\n"
        f"source: {{type: kafka, bootstrap_servers: '{_BOOTSTRAP}', topics: ['{topic}'],"
        f" converter: {json_converter}, max_records_per_batch: {args.per_batch}}}\n"
        "sink: {type: delta, path: lake, mode: mirror}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        f"engine: {{type: spark, master: '{args.master}', trigger_interval_ms: 0,"
        f" max_records_per_read: {args.per_batch}}}\n"
    )
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(pipeline), "--log-level", "INFO"],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def collect() -> None:
        assert process.stderr is not None
        lines.extend(iter(process.stderr.readline, ""))

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    while process.poll() is None:
        done = sum(int(e) for _, e, _ in _BATCH_LINE.findall("".join(lines)))
        if done >= args.events:
            break
        time.sleep(0.5)
    ours_wall = time.monotonic() - started
    failed = process.poll()
    process.send_signal(signal.SIGTERM)
    process.wait(300)
    reader.join(10)
    if failed:
        shutil.rmtree(work, ignore_errors=True)
        raise SystemExit(f"the cdcflow pipeline failed ({failed}):\n{''.join(lines)[-4000:]}")
    batches = [(int(e), int(ms)) for _, e, ms in _BATCH_LINE.findall("".join(lines))]
    ours_steady = _steady(batches)
    ours_rows = _delta_rows(work / "lake" / topic)
    print(
        f"cdcflow kafka -> delta mirror (spark engine, {args.master}):"
        f" {args.events / ours_wall:8,.0f} events/s end to end, {ours_steady:8,.0f} events/s steady"
        f"  ({ours_rows:,} rows, {len(batches)} batches)"
    )
    peer = _child(
        [
            "_delta_plain",
            "--topic",
            topic,
            "--out",
            str(work / "plain"),
            "--checkpoint",
            str(work / "plain-ckpt"),
            "--master",
            args.master,
            "--per-trigger",
            str(args.per_batch),
        ]
    )
    peer_steady = _steady([tuple(b) for b in peer["batches"]])
    print(
        f"plain foreachBatch + MERGE job: {args.events / peer['wall_s']:8,.0f} events/s end to end,"
        f" {peer_steady:8,.0f} events/s steady  ({peer['rows']:,} rows, {len(peer['batches'])} batches)"
    )
    if ours_rows != peer["rows"]:
        print(f"the two tables differ in rows: {ours_rows:,} vs {peer['rows']:,}")
    shutil.rmtree(work, ignore_errors=True)
    _ratio(ours_steady, peer_steady)


def debezium(args: argparse.Namespace) -> None:
    import debezium_peer  # beside this file

    debezium_peer.run(args)


def _native_module() -> Any:
    from cdcflow.native import native_module

    return native_module()


def _core_name() -> str:
    return "compiled core" if _native_module() is not None else "pure-Python core"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--core", choices=["compiled", "python"], default="compiled")
    commands = parser.add_subparsers(dest="peer", required=True)
    log = commands.add_parser("commitlog")
    log.add_argument("--rows", type=int, default=200_000)
    log.add_argument(
        "--table",
        choices=["orders", "accounts"],
        default="orders",
        help="orders: plain rows; accounts: collections, a frozen user type, decimals, static, TTL and deletions",
    )
    log.add_argument("--rounds", type=int, default=5)
    log.add_argument("--warmups", type=int, default=5, help="JVM rounds before the measured ones (JIT)")
    log.add_argument("--soak", type=float, help="instead: parse over and over this many seconds, printing RSS")
    log.add_argument("--segments", type=Path, help="keep the segments here (written on the first run, reused after)")
    log.set_defaults(run=commitlog)
    producer = commands.add_parser("kafka")
    producer.add_argument("--events", type=int, default=200_000)
    producer.add_argument("--event-size", type=int, default=1000, help="datagen payload bytes (values ~1.5 KB)")
    producer.add_argument(
        "--against", choices=["loop", "perf"], default="loop", help="which peer the last line's ratio is against"
    )
    producer.set_defaults(run=kafka)
    lake = commands.add_parser("spark")
    lake.add_argument("--events", type=int, default=100_000)
    lake.add_argument("--event-size", type=int, default=300)
    lake.add_argument("--master", default="local[2]")
    lake.add_argument("--per-batch", type=int, default=20_000, help="records per micro-batch (both jobs)")
    lake.add_argument("--soak", type=float, help="instead: run this many seconds fed at --rate, printing RSS")
    lake.add_argument("--rate", type=float, default=500, help="events/s fed into the topic during --soak")
    lake.set_defaults(run=spark)
    mirror = commands.add_parser("delta")
    mirror.add_argument("--events", type=int, default=30_000)
    mirror.add_argument("--keys", type=int, default=2_000)
    mirror.add_argument("--event-size", type=int, default=100)
    mirror.add_argument("--master", default="local[2]")
    mirror.add_argument("--per-batch", type=int, default=5_000, help="records per micro-batch (both jobs)")
    mirror.set_defaults(run=delta)
    agent = commands.add_parser("debezium")
    agent.add_argument("--rows", type=int, default=200_000, help="orders inserted in the first backlog")
    agent.add_argument("--updates", type=int, default=20_000, help="orders updated after them")
    agent.add_argument("--deletes", type=int, default=4_000, help="orders deleted after them")
    agent.add_argument("--accounts", type=int, default=20_000, help="changes of the accounts table (second backlog)")
    agent.add_argument("--rate", type=float, default=500, help="orders inserted per second in the live run")
    agent.add_argument("--live-s", type=float, default=60, help="how long the live run's measured writes last")
    agent.add_argument("--warmup-s", type=float, default=15, help="live writes before the measured ones")
    agent.add_argument(
        "--decimals", choices=["string", "precise"], default="string", help="decimal.handling.mode, both sides"
    )
    agent.add_argument("--poll-ms", type=int, default=200, help="Debezium's idle polls (cdcflow's poll_interval_ms)")
    agent.add_argument(
        "--offset-flush-ms", type=int, default=1000, help="Debezium's offset.flush.interval.ms (0: its default)"
    )
    agent.add_argument("--idle-s", type=float, default=20, help="a backlog ends after this long without a record")
    agent.add_argument("--node-host", default="127.0.0.31", help="the benchmark's own Cassandra node")
    agent.add_argument("--node-jmx-port", type=int, default=7331)
    agent.add_argument("--keep-node", action="store_true", help="leave the node and the work folder afterwards")
    agent.set_defaults(run=debezium)
    delta_plain = commands.add_parser("_delta_plain")
    for name in ("--topic", "--out", "--checkpoint", "--master"):
        delta_plain.add_argument(name, required=True)
    delta_plain.add_argument("--per-trigger", type=int, required=True)
    delta_plain.set_defaults(run=_delta_plain)
    plain = commands.add_parser("_spark_plain")
    for name in ("--topic", "--out", "--checkpoint", "--master"):
        plain.add_argument(name, required=True)
    plain.add_argument("--per-trigger", type=int, required=True)
    plain.set_defaults(run=_spark_plain)
    for name, run in (("_kafka_cdcflow", _kafka_cdcflow), ("_kafka_loop", _kafka_loop)):
        child = commands.add_parser(name)
        child.add_argument("--events", type=int, required=True)
        child.add_argument("--event-size", type=int, default=1400)
        child.add_argument("--prefix", required=True)
        child.add_argument("--samples-file", required=True)
        child.add_argument("--samples", type=int, default=2000)
        child.set_defaults(run=run)
    args = parser.parse_args()
    if args.core == "python":
        os.environ["CDCFLOW_PURE_PYTHON"] = "1"
    args.run(args)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
