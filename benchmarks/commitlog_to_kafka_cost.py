"""Where the commit-log → Kafka (avro) path spends its CPU, per row change, in one process.

Per record (what ``read`` gives): the compiled core decoding segments to row changes
(``RowChange`` objects with Python values), the source building each ``ChangeEvent``, and the
Avro converter encoding each key and envelope (its compiled writer, the schema registered once).
Compact (what ``read_event_batches`` gives): the compiled core decoding the same segments to
compact batches, and the converter encoding each batch whole. Side by side, datagen's compact
batches: building and encoding the same number of events without a Python object per value.

    python benchmarks/commitlog_to_kafka_cost.py --segments DIR [--rounds 3]

``DIR`` holds the segments ``peers.py commitlog --segments DIR`` keeps (it writes them with a real
Cassandra node on its first run: 200,000 rows of a realistic orders table). Starts the registry.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"


def _row_changes(segments: list[Path], catalog: Any, table_id: str, native: Any) -> list[tuple[Any, Any]]:
    from cdcflow.sources.cassandra_commitlog.compiled import CompiledDecoder, CompiledFramer
    from cdcflow.sources.cassandra_commitlog.segment import read_framed

    changes = []
    for path in segments:
        decoder = CompiledDecoder(catalog, lambda table: table.table_id == table_id, native)
        for item in read_framed(path.read_bytes(), path, CompiledFramer(native, 0, lambda d=decoder: d)):  # type: ignore[misc]
            for table, _, row_changes_of_update in item.changes or ():
                changes.extend((table, change) for change in row_changes_of_update)
    return changes


def _compact_batches(segments: list[Path], catalog: Any, table_id: str, native: Any, dropped: set[str]) -> list[Any]:
    from cdcflow.batches import BatchTable, EventBatch
    from cdcflow.sources.cassandra_commitlog.changes import VERSION
    from cdcflow.sources.cassandra_commitlog.compiled import CompactInto, CompiledDecoder, CompiledFramer
    from cdcflow.sources.cassandra_commitlog.segment import read_framed

    builder = native.CompactBatchBuilder()
    batches = []

    def take(count: int | None) -> None:
        events = builder.take("node", 0, count)
        tables = [
            BatchTable(t.row_schema("c1"), "cassandra", "c1", t.keyspace, t.table, version=VERSION)
            for t in builder.tables()
        ]
        batches.append(EventBatch(events, tables))

    for segment_id, path in enumerate(segments):
        decoder = CompiledDecoder(catalog, lambda table: table.table_id == table_id, native, dropped)
        framer = CompiledFramer(native, 0, lambda d=decoder: d, compact=CompactInto(builder, segment_id))  # type: ignore[misc]
        for section in read_framed(path.read_bytes(), path, framer):
            assert section.refused is None, f"every entry of the benchmark's table travels compact: {section.refused}"
            while len(builder) >= 2000:
                take(2000)
    if len(builder):
        take(None)
    return batches


def _per_change_us(started: float, count: int) -> float:
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from peers import _dropped_tables  # beside this file

    from cdcflow.batches import EventBatch
    from cdcflow.contract import PluginContext
    from cdcflow.converters import AvroConverter, AvroConverterConfig
    from cdcflow.native import native_module
    from cdcflow.processes import tune_for_the_loop
    from cdcflow.sources.cassandra_commitlog.changes import change_event
    from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog
    from cdcflow.sources.datagen import DatagenConfig, DatagenSource

    native = native_module()
    if native is None:
        sys.exit("the compiled core (cdcflow._native) is not built: this measures it")
    if not (args.segments / "table.json").exists():
        subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "peers.py"), "commitlog", "--segments", str(args.segments)],
            check=True,
        )
    subprocess.run(["bash", str(REPO / "scripts" / "services.sh"), "start", "registry"], check=True)
    tune_for_the_loop()  # as a worker process does
    segments = sorted(args.segments.glob("CommitLog-*.log"))
    catalog = SchemaCatalog.load(args.segments / "schema.json")
    table_id = json.loads((args.segments / "table.json").read_text())["id"]
    dropped = _dropped_tables(segments, catalog)  # other tests' tables: skipped, as the source skips them
    context = PluginContext("cost", Path("cost.yaml"))
    avro_config = AvroConverterConfig.model_validate({"type": "avro", "schema_registry_url": REGISTRY})
    converter = AvroConverter(avro_config, context)

    stages: dict[str, list[float]] = {
        "decode": [],
        "event": [],
        "avro": [],
        "compact decode": [],
        "compact avro": [],
        "datagen compact": [],
    }
    count = 0
    for _ in range(args.rounds + 1):  # the first round warms up (and registers the schemas)
        started = time.process_time()
        changes = _row_changes(segments, catalog, table_id, native)
        count = len(changes)
        decode = _per_change_us(started, count)
        started = time.process_time()
        schema = changes[0][0].row_schema("c1")
        events = [change_event(change, schema, "c1", "node", 1, n, 0, 0) for n, (_, change) in enumerate(changes)]
        event = _per_change_us(started, count)
        topic = f"c1.{events[0].source.keyspace}.{events[0].source.table}"
        started = time.process_time()
        for built in events:
            converter.serialize_key(built, topic)
            converter.serialize_value(built, topic)
        avro = _per_change_us(started, count)
        del events

        started = time.process_time()
        batches = _compact_batches(segments, catalog, table_id, native, dropped)
        compact_decode = _per_change_us(started, count)
        assert sum(len(batch) for batch in batches) == count
        started = time.process_time()
        for batch in batches:
            encoded = converter.serialize_event_batch(batch, [topic] * len(batch.tables), True)
            assert encoded is not None, "the commit log's compact batches are encoded whole"
        compact_avro = _per_change_us(started, count)
        del batches

        datagen = DatagenSource(
            DatagenConfig.model_validate({"type": "datagen", "count": count, "partitions": 1, "event_size": 150}),
            context,
        )
        (partition,) = datagen.partitions()
        start = datagen.initial_offset(partition)
        end = datagen.latest_offset(partition, start, count)
        started = time.process_time()
        batches = datagen.read_event_batches(partition, start, end, 2000)
        assert batches is not None
        for batch in batches:
            assert isinstance(batch, EventBatch)
            encoded = converter.serialize_event_batch(batch, [table.destination() for table in batch.tables], True)
            assert encoded is not None, "datagen's batches are encoded whole"
        compact = _per_change_us(started, count)
        for name, value in zip(stages, (decode, event, avro, compact_decode, compact_avro, compact), strict=True):
            stages[name].append(value)
        del changes

    medians = {name: statistics.median(values[1:]) for name, values in stages.items()}
    print(f"{count:,} row changes from {len(segments)} segments (median of {args.rounds} rounds, CPU µs a change):")
    print(f"  compiled decoding to RowChange objects  {medians['decode']:6.2f}")
    print(f"  building the ChangeEvent                {medians['event']:6.2f}")
    print(f"  Avro key and envelope                   {medians['avro']:6.2f}")
    total = medians["decode"] + medians["event"] + medians["avro"]
    print(f"  commit log to Kafka messages, in all    {total:6.2f}")
    compact_total = medians["compact decode"] + medians["compact avro"]
    print("compact batches (read_event_batches):")
    print(f"  compiled decoding to compact batches    {medians['compact decode']:6.2f}")
    print(f"  Avro keys and envelopes, batch by batch {medians['compact avro']:6.2f}")
    print(f"  commit log to Kafka messages, in all    {compact_total:6.2f}")
    print(f"ratio: {total / compact_total:.2f} (per-record CPU ÷ compact CPU)")
    print(f"datagen compact batches, built and encoded in the compiled core: {medians['datagen compact']:6.2f}")


if __name__ == "__main__":
    main()
