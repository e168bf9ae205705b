"""The source's sorter (order, dedup, late rows, spill) and the sink's write runs, without a cluster."""

from __future__ import annotations

import random
from pathlib import Path

from cdcflow.sinks.tikv.sink import _runs, _Write
from cdcflow.sources.tikv_rawkv.sorter import DELETE, PUT, Item, PartitionSorter


def _item(ts: int, key: bytes, kind: int = PUT, value: bytes = b"v") -> Item:
    return Item(ts, key, ts, kind, value, 0, "")


def test_rows_come_out_by_timestamp_then_key_each_once() -> None:
    sorter = PartitionSorter(base_ts=10, memory_limit_bytes=1 << 20)
    sorter.add([_item(15, b"b"), _item(12, b"a"), _item(15, b"a")])
    sorter.add([_item(12, b"a"), _item(20, b"c")])  # a resubscribed region sends ts 12 again
    assert sorter.end_for(10, 18, None) == 18
    assert [(i.ts, i.key) for i in sorter.read(10, 18)] == [(12, b"a"), (15, b"a"), (15, b"b")]
    assert sorter.read(10, 18) == sorter.read(10, 12) + sorter.read(12, 18)


def test_end_for_caps_a_range_near_max_records_keeping_whole_timestamps() -> None:
    sorter = PartitionSorter(base_ts=0, memory_limit_bytes=1 << 20)
    sorter.add([_item(ts, b"k%d" % n) for ts in range(1, 11) for n in range(3)])
    end = sorter.end_for(0, 100, 4)
    assert end == 2  # the 4th row has ts 2; all three rows of ts 2 are in
    assert len(sorter.read(0, end)) == 6


def test_a_row_arriving_after_its_range_was_handed_out_goes_to_the_next_range() -> None:
    sorter = PartitionSorter(base_ts=0, memory_limit_bytes=1 << 20)
    sorter.add([_item(5, b"a")])
    assert sorter.end_for(0, 8, None) == 8
    first = sorter.read(0, 8)
    sorter.add([_item(7, b"late")])
    assert sorter.read(0, 8) == first and sorter.late_rows == 1
    assert sorter.end_for(8, 20, None) == 20
    assert [(i.key, i.ts, i.sort_ts) for i in sorter.read(8, 20)] == [(b"late", 7, 9)]


def test_spilled_runs_read_back_identically_and_are_discarded_after_commit(tmp_path: Path) -> None:
    rng = random.Random(3)
    rows = [_item(rng.randrange(1, 50_000), b"key-%06d" % n, rng.choice([PUT, DELETE])) for n in range(20_000)]
    in_memory = PartitionSorter(base_ts=0, memory_limit_bytes=1 << 30)
    spilling = PartitionSorter(base_ts=0, memory_limit_bytes=64 << 10, spill_dir=tmp_path)
    for start in range(0, len(rows), 700):
        in_memory.add(rows[start : start + 700])
        spilling.add(rows[start : start + 700])
    assert spilling.spilled_runs > 3 and in_memory.spilled_runs == 0
    assert spilling.read(0, 50_000) == in_memory.read(0, 50_000) == sorted(rows)
    assert spilling.read(1000, 30_000) == in_memory.read(1000, 30_000)
    assert spilling.end_for(0, 50_000, 5000) == in_memory.end_for(0, 50_000, 5000)
    spilling.discard_through(50_000)
    assert spilling.held_rows == 0 and list(tmp_path.iterdir()) == []


def test_sink_runs_keep_per_key_order_and_turn_expired_puts_into_deletes() -> None:
    now = 1_000_000.0
    writes = [
        _Write(b"a", b"1", 0),
        _Write(b"b", b"1", int(now) + 60),
        _Write(b"a", b"2", 0),  # a repeats: a new run, so a=1 and a=2 are never merged or swapped
        _Write(b"c", None, 0),
        _Write(b"d", b"old", int(now) - 5),  # expired: written as a delete
        _Write(b"e", b"1", 0),
    ]
    runs = _runs(writes, now)
    assert [(is_put, [(w.key, w.value) for w in run]) for is_put, run in runs] == [
        (True, [(b"a", b"1"), (b"b", b"1")]),
        (True, [(b"a", b"2")]),
        (False, [(b"c", None), (b"d", None)]),
        (True, [(b"e", b"1")]),
    ]
    flattened = [(w.key, w.value) for _, run in runs for w in run]
    assert [k for k, _ in flattened] == [w.key for w in writes]
