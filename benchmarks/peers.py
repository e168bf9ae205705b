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

``--core python`` runs cdcflow's pure-Python core instead of the compiled one (CDCFLOW_PURE_PYTHON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

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


def _write_orders(session: Any, keyspace: str, rows: int) -> None:
    import datetime as dt
    import random
    from decimal import Decimal

    from cassandra.concurrent import execute_concurrent_with_args

    insert = session.prepare(
        f"INSERT INTO {keyspace}.orders (customer_id, order_id, status, currency, total, items, express,"
        " created_at, updated_at, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    rng = random.Random(7)
    customers = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rows // 20 + 1)]
    words = ["express", "gift", "wrap", "please", "leave", "at", "the", "door", "call", "before", "delivery"]
    now = dt.datetime(2026, 11, 1)
    batch = []
    for number in range(rows):
        created = now + dt.timedelta(seconds=number)
        batch.append(
            (
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
        )
        if len(batch) == 2000:
            execute_concurrent_with_args(session, insert, batch, concurrency=64)
            batch = []
    if batch:
        execute_concurrent_with_args(session, insert, batch, concurrency=64)


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


def _cdcflow_parse(segments: list[Path], catalog: Any, table_id: str, rounds: int) -> tuple[float, float, int]:
    """Median MB/s (wall-clock, and per CPU-second) of reading the segments to row changes with
    every value decoded, as the source does."""
    from cdcflow.native import native_module
    from cdcflow.sources.cassandra_commitlog.changes import row_changes
    from cdcflow.sources.cassandra_commitlog.compiled import CompiledDecoder, CompiledFramer
    from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
    from cdcflow.sources.cassandra_commitlog.segment import Entry, read_entries, read_framed
    from cdcflow.worker import tune_garbage_collector

    tune_garbage_collector()  # as a worker process does
    native = native_module()
    wanted = lambda table: table.table_id == table_id  # noqa: E731
    size = sum(p.stat().st_size for p in segments)
    speeds, cpu_speeds, changes = [], [], 0
    for round_number in range(rounds + 1):  # the first round warms up
        changes = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        for path in segments:
            data = path.read_bytes()
            if native is not None:
                decoder = CompiledDecoder(catalog, wanted, native)
                for item in read_framed(data, path, CompiledFramer(native, 0, lambda d=decoder: d)):  # type: ignore[misc]
                    for _, _, row_changes_of_update in item.changes or ():
                        changes += len(row_changes_of_update)
            else:
                reference = MutationDecoder(catalog, 7, wanted)
                for entry in read_entries(data, path):
                    if isinstance(entry, Entry):
                        for update in reference.decode(entry.mutation).updates:
                            changes += len(list(row_changes(update)))
        if round_number:
            speeds.append(size / 1e6 / (time.perf_counter() - started))
            cpu_speeds.append(size / 1e6 / (time.process_time() - cpu_started))
    return statistics.median(speeds), statistics.median(cpu_speeds), changes


def _java_peer(
    segments: list[Path], keyspace: str, table_id: str, cql: str, warmups: int, rounds: int
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


def _write_segments(rows: int, into: Path) -> None:
    """Writes ``rows`` orders on the node and saves the segments holding them, with the schema
    (``schema.json``) and the table (``table.json``: keyspace, id, CQL), into ``into``."""
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
        cql = _ORDERS.format(keyspace=keyspace)
        session.execute(cql)
        print(f"writing {rows:,} rows into {keyspace}.orders on the Cassandra node ...")
        started = time.monotonic()
        _write_orders(session, keyspace, rows)
        print(f"  written in {time.monotonic() - started:.0f} s")
        catalog = load_schema_catalog(session)
        table = catalog.by_name(keyspace, "orders")
        assert table is not None
        into.mkdir(parents=True, exist_ok=True)
        # Copies: the node (and other readers of cdc_raw) may remove segments while this runs.
        for path in _segments_with_table(cdc_raw, catalog, table.table_id, rows, timeout_s=300):
            shutil.copy(path, into / path.name)
        catalog.save(into / "schema.json")
        (into / "table.json").write_text(json.dumps({"keyspace": keyspace, "id": table.table_id, "cql": cql}))
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        cluster.shutdown()


def commitlog(args: argparse.Namespace) -> None:
    from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog

    folder = args.segments or Path(tempfile.mkdtemp(prefix="cdcflow-peer-commitlog-"))
    if not (folder / "table.json").exists():
        _write_segments(args.rows, folder)
    segments = sorted(folder.glob("CommitLog-*.log"))
    catalog = SchemaCatalog.load(folder / "schema.json")
    table = json.loads((folder / "table.json").read_text())
    size = sum(p.stat().st_size for p in segments)
    print(f"segments: {len(segments)} files, {size / 1e6:.1f} MB")
    ours, ours_cpu, changes = _cdcflow_parse(segments, catalog, table["id"], args.rounds)
    print(
        f"cdcflow ({_core_name()}): {ours:7.1f} MB/s, {ours_cpu:7.1f} MB per CPU-second"
        f"  ({changes:,} row changes, every value decoded)"
    )
    peer, peer_cpu, rows = _java_peer(segments, table["keyspace"], table["id"], table["cql"], args.warmups, args.rounds)
    print(
        f"Cassandra CommitLogReader (JVM): {peer:7.1f} MB/s, {peer_cpu:7.1f} MB per CPU-second"
        f"  ({rows:,} rows, every value composed)"
    )
    print(f"per CPU-second: {ours_cpu / peer_cpu:.2f}  (medians of {args.rounds} rounds; wall-clock below)")
    if args.segments is None:
        shutil.rmtree(folder, ignore_errors=True)
    _ratio(ours, peer)


def _core_name() -> str:
    from cdcflow.native import native_module

    return "compiled core" if native_module() is not None else "pure-Python core"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--core", choices=["compiled", "python"], default="compiled")
    commands = parser.add_subparsers(dest="peer", required=True)
    log = commands.add_parser("commitlog")
    log.add_argument("--rows", type=int, default=200_000)
    log.add_argument("--rounds", type=int, default=5)
    log.add_argument("--warmups", type=int, default=5, help="JVM rounds before the measured ones (JIT)")
    log.add_argument("--segments", type=Path, help="keep the segments here (written on the first run, reused after)")
    log.set_defaults(run=commitlog)
    args = parser.parse_args()
    if args.core == "python":
        os.environ["CDCFLOW_PURE_PYTHON"] = "1"
    args.run(args)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
