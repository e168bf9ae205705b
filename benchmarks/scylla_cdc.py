"""The scylla_cdc source on ScyllaDB's CDC tables written into the local Cassandra node.

Three figures (``all`` runs them in turn):

* ``throughput``: events/s the source reads from the log tables (256 streams by default:
  64 vnodes x 4 shards), in process, from a backlog of ``--rows`` inserts; also per CPU second.
* ``latency``: base write to Kafka record (the record's timestamp, set when the sink produced it;
  ``linger_ms`` 5) through ``cdcflow run``, p50/p99, for each ``--confidence`` window (ms), writing
  ``--rate`` rows/s for ``--seconds``.
* ``catchup``: a generation that started a day ago, ``--sparse-rows`` rows spread over the day, read
  from ``start: earliest``: wall time and CQL queries, against the 2,880 30-second windows per
  stream group a window-by-window consumer issues.
* ``split``: the ``throughput`` backlog again, next to the same number of base writes that ScyllaDB
  splits into three log rows each (``INSERT`` of a map with a TTL: the row marker, the map's
  tombstone, its cells), which the source coalesces into one event each: events/s of both, as a
  ratio.
* ``idle``: CQL requests per second the source sends to a table nobody writes to (``--idle-vnodes``
  stream groups, 256 by default), run by the worker engine's own loop in process with the
  source's defaults, counted by a request listener on its session after ``--idle-warmup`` s, over
  ``--idle-seconds`` s: log queries and the rest (CDC metadata).

    bash scripts/services.sh start kafka cassandra
    python benchmarks/scylla_cdc.py all
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from cassandra_to_kafka_latency import _consume as consume  # benchmarks/ is on the path of its scripts

from cdcflow.config import parse_pipeline
from cdcflow.contract import PluginContext
from cdcflow.events import ChangeEvent
from cdcflow.metrics import METRICS_REGISTRY
from cdcflow.pipeline import build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.sources.cassandra_commitlog.cluster import connect
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the ScyllaDB stand-in is test machinery, not part of the package

from tests.standins.scylla.writer import ScyllaCdcWriter, SimulatedKeyspaces  # noqa: E402

BOOTSTRAP = "127.0.0.1:9092"
DAY_US = 86_400_000_000


class Setup:
    """A data keyspace, simulated system keyspaces and one CDC table, dropped afterwards."""

    consistency: str | None = None  # --consistency: the source's, when not its default

    def __init__(self, session: Any, vnodes: int, shards: int, generation_start_us: int | None = None) -> None:
        self.session = session
        self.keyspace = f"bench{uuid.uuid4().hex[:8]}"
        session.execute(
            f"CREATE KEYSPACE {self.keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        )
        self.writer = ScyllaCdcWriter(session, SimulatedKeyspaces.prefixed(self.keyspace), shards=shards, seed=1)
        self.writer.create_metadata_tables()
        self.writer.bootstrap(vnodes=vnodes, timestamp_us=generation_start_us)
        self.table = f"{self.keyspace}.orders"
        self.writer.create_table(
            self.keyspace, "orders", [("id", "int")], [], [("total", "int"), ("note", "text"), ("placed", "timestamp")]
        )
        self.tagged = f"{self.keyspace}.tagged"
        self.writer.create_table(
            self.keyspace,
            "tagged",
            [("id", "int")],
            [],
            [("total", "int"), ("note", "text"), ("placed", "timestamp"), ("tags", "map<int, text>")],
        )

    def source_config(self, table: str | None = None, **overrides: Any) -> dict[str, Any]:
        return {
            "type": "scylla_cdc",
            "cluster": "bench",
            "tables": [table or self.table],
            "generations_keyspace": self.writer.keyspaces.distributed,
            "tablets_keyspace": self.writer.keyspaces.local,
            **({"consistency": self.consistency} if self.consistency else {}),
            **overrides,
        }

    def drop(self) -> None:
        self.writer.drop_keyspaces()
        self.session.execute(f"DROP KEYSPACE IF EXISTS {self.keyspace}")


def row(i: int) -> dict[str, Any]:
    return {"id": i, "total": i * 7, "note": f"order number {i} " + "x" * 60, "placed": 1_700_000_000_000 + i}


def drain(source: ScyllaCdcSource) -> int:
    """Read every partition up to its watermark, cycling over them as the worker engine does."""
    partitions = source.partitions()
    starts = {p.id: source.initial_offset(p) for p in partitions}
    events, progressed = 0, True
    while progressed:
        progressed = False
        for partition in partitions:
            start = starts[partition.id]
            end = source.latest_offset(partition, start, 50_000)
            if end != start:
                events += sum(1 for e in source.read(partition, start, end) if isinstance(e, ChangeEvent))
                starts[partition.id], progressed = end, True
    return events


def open_source(config: dict[str, Any], pipeline: str) -> ScyllaCdcSource:
    source = ScyllaCdcSource(ScyllaCdcSourceConfig.model_validate(config), PluginContext(pipeline, Path("b.yaml")))
    source.open()
    return source


def read_backlog(setup: Setup, table: str, args: argparse.Namespace) -> tuple[int, float, float]:
    """Events read from ``table``'s backlog in process: (events, wall seconds, CPU seconds)."""
    time.sleep(1.2)  # past the confidence window
    config = setup.source_config(
        table,
        confidence_window_ms=1000,
        cluster_write_timeout_ms=1000,
        generation_leeway_ms=0,  # the stand-in's writes carry the coordinator's clock
        max_concurrent_queries=args.concurrent_queries,
    )
    source = open_source(config, f"bench-{table}")
    try:
        wall, cpu = time.monotonic(), time.process_time()
        events = drain(source)
        return events, time.monotonic() - wall, time.process_time() - cpu
    finally:
        source.close()


def load(setup: Setup, table: str, rows: int, split: bool) -> None:
    loaded = time.monotonic()
    for first in range(0, rows, 5000):
        batch = (tagged(i) if split else row(i) for i in range(first, min(first + 5000, rows)))
        setup.writer.insert_many(table, batch, ttl_s=86_400 if split else None)
    print(f"loaded {rows} base writes into {table} in {time.monotonic() - loaded:.1f} s")


def tagged(i: int) -> dict[str, Any]:
    return {**row(i), "tags": {i % 10: f"tag {i}"}}


def throughput(session: Any, args: argparse.Namespace) -> None:
    setup = Setup(session, args.vnodes, args.shards, generation_start_us=int(time.time() * 1e6) - 60_000_000)
    try:
        load(setup, setup.table, args.rows, split=False)
        events, wall, cpu = read_backlog(setup, setup.table, args)
        streams = args.vnodes * args.shards
        print(
            f"throughput ({args.concurrent_queries} queries ahead): {events} events from {streams} streams in "
            f"{wall:.2f} s: {events / wall:,.0f} events/s, {events / cpu:,.0f} per CPU-second of the reader"
        )
    finally:
        setup.drop()


def split(session: Any, args: argparse.Namespace) -> None:
    setup = Setup(session, args.vnodes, args.shards, generation_start_us=int(time.time() * 1e6) - 60_000_000)
    try:
        load(setup, setup.table, args.rows, split=False)
        load(setup, setup.tagged, args.rows, split=True)
        rows = sum(1 for _ in session.execute(f'SELECT "cdc$operation" FROM {setup.tagged}_scylla_cdc_log'))
        one = read_backlog(setup, setup.table, args)
        three = read_backlog(setup, setup.tagged, args)
        for name, (events, wall, cpu), logged in (("1 row/write", one, args.rows), ("3 rows/write", three, rows)):
            print(
                f"split, {name}: {events} events from {logged} log rows in {wall:.2f} s: {events / wall:,.0f} "
                f"events/s ({logged / wall:,.0f} rows/s), {events / cpu:,.0f} events per CPU-second"
            )
        print(f"split: events/s of 3-row writes / 1-row writes = {(three[0] / three[1]) / (one[0] / one[1]):.2f}")
    finally:
        setup.drop()


def latency(session: Any, args: argparse.Namespace) -> None:
    for confidence in (int(c) for c in args.confidence.split(",")):
        setup = Setup(session, args.vnodes, args.shards)
        prefix = f"bench{uuid.uuid4().hex[:6]}"
        folder = Path(tempfile.mkdtemp(prefix="scylla-latency-"))
        source = setup.source_config(
            cluster=prefix,
            confidence_window_ms=confidence,
            cluster_write_timeout_ms=min(confidence, 1000),
            generation_leeway_ms=0,  # the stand-in's writes carry the coordinator's clock
        )
        (folder / "p.yaml").write_text(
            f"name: {prefix}\nsource: {json.dumps(source)}\n"
            f"sink: {{type: kafka, bootstrap_servers: '{BOOTSTRAP}', linger_ms: 5}}\n"
            "checkpoint: {type: file, path: ckpt, interval_ms: 1000}\n"
        )
        worker = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(folder / "p.yaml")], cwd=REPO)
        try:
            time.sleep(3)  # the worker starts and lists its partitions
            count = int(args.rate * args.seconds)
            began = time.monotonic()
            for i in range(count):
                setup.writer.insert(setup.table, row(i))
                time.sleep(max(0.0, began + (i + 1) / args.rate - time.monotonic()))
            consumed = consume(BOOTSTRAP, f"{prefix}.{setup.table}", count, confidence / 1000 + 60)
            latencies = sorted(kafka_ms - written_us / 1000 for written_us, kafka_ms in consumed)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
            setup.drop()
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99) - 1]
        print(
            f"latency, confidence {confidence} ms: {len(latencies)}/{count} arrived, p50 {p50:,.0f} ms, "
            f"p99 {p99:,.0f} ms (p50 - confidence {p50 - confidence:,.0f} ms)"
        )


def catchup(session: Any, args: argparse.Namespace) -> None:
    now = int(time.time() * 1e6)
    setup = Setup(session, args.vnodes, args.shards, generation_start_us=now - DAY_US)
    try:
        rng = random.Random(1)
        for i in range(args.sparse_rows):
            setup.writer.insert(setup.table, row(i), timestamp_us=now - DAY_US + rng.randrange(DAY_US - 5_000_000))
        pipeline = f"bench-catchup-{setup.keyspace}"
        source = open_source(setup.source_config(), pipeline)
        try:
            wall = time.monotonic()
            events = drain(source)
            wall = time.monotonic() - wall
        finally:
            source.close()

        def count(what: str) -> int:
            labels = {"pipeline": pipeline, "what": what}
            return int(METRICS_REGISTRY.get_sample_value("cdcflow_source_counted_total", labels) or 0)

        queries = count("window_query") + count("probe")
        print(
            f"catch-up over a day: {events}/{args.sparse_rows} events from {args.vnodes} stream groups in "
            f"{wall:.2f} s with {queries} queries (30 s windows: {2880 * args.vnodes:,} queries)"
        )
    finally:
        setup.drop()


class RequestCounter:
    """Counts the requests a driver session sends (its request-init listener), log queries apart."""

    def __init__(self) -> None:
        self.log_queries = 0
        self.other = 0

    def __call__(self, response_future: Any) -> None:
        statement = response_future.query
        text = getattr(statement, "query_string", None) or getattr(
            getattr(statement, "prepared_statement", None), "query_string", ""
        )
        if "_scylla_cdc_log" in text:
            self.log_queries += 1
        else:
            self.other += 1


def idle(session: Any, args: argparse.Namespace) -> None:
    setup = Setup(session, args.idle_vnodes, args.shards, generation_start_us=int(time.time() * 1e6) - 60_000_000)
    folder = Path(tempfile.mkdtemp(prefix="scylla-idle-"))
    try:
        registry = PluginRegistry.from_entry_points()
        data = {
            "name": f"idle-{setup.keyspace}",
            "source": setup.source_config(),
            "sink": {"type": "file", "path": str(folder / "events.jsonl")},
            "checkpoint": {"type": "file", "path": str(folder / "ckpt")},
        }
        runner = build_runner(parse_pipeline(data, folder / "p.yaml", registry), registry)
        worker = threading.Thread(target=runner.run, daemon=True)
        worker.start()
        source: Any = runner.source
        while getattr(source, "_session", None) is None:
            time.sleep(0.05)
        counter = RequestCounter()
        source._session.add_request_init_listener(counter)
        time.sleep(args.idle_warmup)
        before = (counter.log_queries, counter.other)
        time.sleep(args.idle_seconds)
        log_queries, other = counter.log_queries - before[0], counter.other - before[1]
        runner.stop.set()
        worker.join(timeout=60)
        print(
            f"idle, {args.idle_vnodes} stream groups ({args.idle_vnodes * args.shards} streams), after "
            f"{args.idle_warmup:g} s, over {args.idle_seconds:g} s: {log_queries / args.idle_seconds:,.1f} log "
            f"queries/s, {other / args.idle_seconds:,.1f} other requests/s"
        )
    finally:
        setup.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["throughput", "latency", "catchup", "split", "idle", "all"])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--vnodes", type=int, default=64)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--confidence", default="1000,3000,10000", help="confidence windows (ms) to measure")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--sparse-rows", type=int, default=500)
    parser.add_argument("--concurrent-queries", type=int, default=4, help="the source's max_concurrent_queries")
    parser.add_argument("--idle-vnodes", type=int, default=256, help="idle: stream groups of the idle table")
    parser.add_argument("--idle-warmup", type=float, default=30.0, help="idle: seconds before counting")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle: seconds counted")
    parser.add_argument("--consistency", help="the source's consistency (default: the source's own)")
    args = parser.parse_args()
    Setup.consistency = args.consistency
    cluster, session = connect(["127.0.0.1"])
    try:
        for what in ("throughput", "latency", "catchup", "split", "idle"):
            if args.what in (what, "all"):
                globals()[what](session, args)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
