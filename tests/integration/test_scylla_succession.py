"""Per-key order across a vnode generation switch and tablet merges and splits (issue 22, item 4).

A backlog is written first, on the stand-in's own clock ten minutes in the past, so that the
whole history is there when the pipeline starts: every key is updated in the old generation (the
old stream set) and again after the switch (merge, split). Two ``cdcflow run`` worker processes
then read it with reads of at most five base writes, so an old partition takes many reads to
drain while its successors could be read at once. Each key's values arrive in Kafka in the order
the test wrote them, or the test fails: the order comes from the values the test wrote, not from
anything the source computed.
"""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import parse_pipeline
from cdcflow.plugins import PluginRegistry
from cdcflow.spark_engine.datasource import CdcflowStreamReader, SourceJob
from tests.integration.kafka_helpers import start_logged
from tests.integration.scylla_helpers import Arrived, arrived, pipeline, scylla_writer, source_section, wait_for
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest

KEYS = 12
ROUNDS = 10  # updates of each key per stream set


class SteppedClock:
    """The stand-in's coordinator clock, moved only by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def write_backlog(
    writer: ScyllaCdcWriter, clock: SteppedClock, keyspace: str
) -> tuple[dict[Any, list[int]], list[int]]:
    """Every key written ``ROUNDS`` times in each stream set of two tables: ``orders`` (vnodes)
    before and after a node joins, ``readings`` (4 tablets) before and after a merge into 2, then
    a split into 8. Returns each key's values in write order and the switch, merge and split times."""
    writer.bootstrap(vnodes=4)
    writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int")])
    writer.create_table(keyspace, "readings", [("id", "int")], [], [("total", "int")], tablets=4)
    tables = [f"{keyspace}.orders", f"{keyspace}.readings"]
    written: dict[Any, list[int]] = defaultdict(list)
    for _ in range(ROUNDS):
        write_round(writer, clock, tables, written)
    switch = writer.join_node(vnodes=4)  # a second node: the new generation operates 4 s later
    merge = writer.change_tablets(tables[1], 2, delay_s=1.0)
    clock.advance(max(switch, merge) / 1e6 - clock.now + 0.01)
    for _ in range(ROUNDS):
        write_round(writer, clock, tables, written)
    split = writer.change_tablets(tables[1], 8, delay_s=1.0)
    clock.advance(split / 1e6 - clock.now + 0.01)
    for _ in range(ROUNDS):
        write_round(writer, clock, tables, written)
    return written, [switch, merge, split]


@pytest.fixture
def past_writer(scylla_writer: ScyllaCdcWriter) -> tuple[ScyllaCdcWriter, SteppedClock]:
    """The stand-in writer on a clock of the test's, ten minutes back: whatever it writes is a
    backlog the moment the pipeline starts."""
    clock = SteppedClock(time.time() - 600)
    scylla_writer.clock = clock
    return scylla_writer, clock


def write_round(writer: ScyllaCdcWriter, clock: SteppedClock, tables: list[str], written: dict[Any, list[int]]) -> None:
    """Every key of every table once more, each write a millisecond after the last; the value
    written is the key's running count, recorded in ``written`` in write order."""
    for table in tables:
        for key in range(KEYS):
            values = written[(table.split(".")[1], key)]
            total = len(values)
            if total == 0:
                writer.insert(table, {"id": key, "total": total})
            else:
                writer.update(table, {"id": key}, {"total": total})
            values.append(total)
            clock.advance(0.001)


def first_arrivals_by_key(events: list[Arrived]) -> dict[Any, list[int]]:
    """Each key's values in Kafka order (topic partition offsets), first arrivals only."""
    seen: set[tuple[str, str, int, str]] = set()
    found: dict[Any, list[int]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.topic, e.kafka_partition, e.offset)):
        if event.identity in seen:
            continue
        seen.add(event.identity)
        assert event.after is not None
        found[(event.table, event.key["id"])].append(event.after["total"])
    return found


@pytest.mark.kafka
def test_a_backlog_across_a_generation_switch_and_tablet_merge_and_split_keeps_per_key_order(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, keyspace: str, past_writer: Any
) -> None:
    writer, clock = past_writer
    written, (switch, merge, split) = write_backlog(writer, clock, keyspace)
    orders, readings = f"{keyspace}.orders", f"{keyspace}.readings"
    total = sum(len(values) for values in written.values())

    file = pipeline(
        tmp_path,
        topic_prefix,
        kafka_bootstrap,
        source_section(writer, [orders, readings], start="earliest"),
        engine=", workers: 2, max_records_per_read: 5, batch_size: 5",
    )
    process, log = start_logged(file)
    try:
        wait_for(lambda: sum(" running: " in line for line in log) >= 2, 60, "both workers to start", process)

        def delivered() -> int:
            return len({e.identity for e in arrived(kafka_bootstrap, topic_prefix)})

        wait_for(lambda: delivered() >= total, 120, f"{total} writes", process)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0

    events = arrived(kafka_bootstrap, topic_prefix)
    partitions = {e.source_partition for e in events}
    # The history spans the switch and both resizes: every stream set was read.
    assert {f"g{switch // 1000}", f"t{merge // 1000}", f"t{split // 1000}"} <= {p.split("/")[1] for p in partitions}
    arrivals = first_arrivals_by_key(events)
    assert set(arrivals) == set(written)
    out_of_order = {json.dumps(key): got for key, got in arrivals.items() if got != written[key]}
    assert not out_of_order, (
        f"{len(out_of_order)} keys arrived out of write order, e.g. {next(iter(out_of_order.items()))}"
    )


def test_the_spark_planner_reads_a_successor_only_in_a_batch_after_its_predecessors_last_read(
    tmp_path: Path, keyspace: str, past_writer: Any
) -> None:
    """The Spark engine's planner (its DataSourceStreamReader, driven here as Spark's micro-batch
    loop drives it, batch after batch) over the same backlog. Spark runs a batch's partitions as
    tasks in any order, so a key's changes keep their order only if each batch holds the key's
    changes of one partition, and the batches come in write order."""
    writer, clock = past_writer
    written, _ = write_backlog(writer, clock, keyspace)
    total = sum(len(values) for values in written.values())
    data = {
        "name": "spark-succession",
        "source": source_section(writer, [f"{keyspace}.orders", f"{keyspace}.readings"], start="earliest"),
        "sink": {"type": "parquet", "path": str(tmp_path / "out")},
        "engine": {"type": "spark", "max_records_per_read": 5},
    }
    registry = PluginRegistry.from_entry_points()
    reader = CdcflowStreamReader(SourceJob.of(parse_pipeline(data, tmp_path / "p.yaml", registry), with_record=False))
    batches: list[dict[Any, dict[str, list[int]]]] = []  # per batch: key -> source partition -> values
    start = reader.initialOffset()
    delivered = 0
    try:
        while delivered < total:
            assert len(batches) < 500, f"{delivered} of {total} changes after 500 batches"
            end = reader.latestOffset(start, None)  # type: ignore[arg-type]
            batch: dict[Any, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
            for piece in reader.partitions(start, end):
                for arrow in reader.read(piece):
                    for row in arrow.to_pylist():
                        key = (row["table"], json.loads(row["key"])["id"])
                        batch[key][row["source_partition"]].append(json.loads(row["after"])["total"])
                        delivered += 1
            batches.append(batch)
            reader.commit(end)  # the batch completed: its ends are the next one's start
            start = end
    finally:
        reader.stop()
    mixed = {key: sorted(parts) for batch in batches for key, parts in batch.items() if len(parts) > 1}
    assert not mixed, f"a batch holds a key's changes from two partitions, read in any order: {mixed}"
    in_batch_order: dict[Any, list[int]] = defaultdict(list)
    for batch in batches:
        for key, parts in batch.items():
            [values] = parts.values()
            in_batch_order[key] += values
    assert in_batch_order == written
