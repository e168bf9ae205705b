"""Helpers for plugin authors: check a source against the contract without writing the harness again.

    from cdcflow.testing import check_source_contract

    def test_my_source_keeps_the_contract():
        report = check_source_contract(MySource(config, context))
        assert report.records > 0

:func:`check_source_contract` raises :class:`SourceContractViolationError` naming the partition and
the rule broken: offsets that do not survive JSON, reads that are not deterministic, ranges that
do not split, watermarks that go back, a finished partition that grows, or compact batches
(:class:`~cdcflow.capabilities.ReadsEventBatches`) that differ from what ``read`` gives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cdcflow.capabilities import ReadsEventBatches, is_finished, watermark_of
from cdcflow.contract import Offset, Partition, Rejected, Source, offset_key
from cdcflow.events import Record

__all__ = ["SourceContractReport", "SourceContractViolationError", "check_source_contract"]


class SourceContractViolationError(AssertionError):
    """A source broke one of the promises in :class:`cdcflow.contract.Source`."""


@dataclass
class SourceContractReport:
    partitions: int = 0
    ranges: int = 0
    records: int = 0


def _comparable(records: Iterable[Record | Rejected]) -> list[Any]:
    # ts_ms is processing time: the one field a replay may legitimately change.
    return [
        (r.record.with_changes(ts_ms=0), r.stage, str(r.error)) if isinstance(r, Rejected) else r.with_changes(ts_ms=0)
        for r in records
    ]


def _require(condition: bool, partition: Partition, rule: str) -> None:
    if not condition:
        raise SourceContractViolationError(f"partition {partition.id}: {rule}")


def check_source_contract(source: Source[Any], max_records: int = 100, cycles: int = 5) -> SourceContractReport:
    """Read ``cycles`` ranges of up to ``max_records`` from every partition and check each rule.

    The source must be open. Reads happen twice per range, so keep ``max_records`` small for
    sources backed by a real system.
    """
    report = SourceContractReport()
    for partition in source.partitions():
        report.partitions += 1
        start = source.initial_offset(partition)
        _check_offset(partition, start)
        _require(list(source.read(partition, start, start)) == [], partition, "read(start, start] must be empty")
        previous_watermark = watermark_of(source, partition, start)
        for _ in range(cycles):
            end = source.latest_offset(partition, start, max_records)
            _check_offset(partition, end)
            if offset_key(end) == offset_key(start):
                break
            first = _comparable(source.read(partition, start, end))
            _require(
                first == _comparable(source.read(partition, start, end)),
                partition,
                f"read({start}, {end}] is not deterministic",
            )
            report.ranges += 1
            report.records += len(first)
            _check_event_batches(source, partition, start, end, first)
            middle = source.latest_offset(partition, start, max(1, len(first) // 2))
            if offset_key(middle) not in (offset_key(start), offset_key(end)):
                split = _comparable(source.read(partition, start, middle)) + _comparable(
                    source.read(partition, middle, end)
                )
                _require(split == first, partition, f"read({start}, {end}] differs from the same range read in two")
            watermark = watermark_of(source, partition, end)
            if previous_watermark is not None and watermark is not None:
                _require(watermark >= previous_watermark, partition, f"watermark went back at {end}")
            previous_watermark = watermark
            start = end
        if is_finished(source, partition, start):
            again = source.latest_offset(partition, start, max_records)
            _require(offset_key(again) == offset_key(start), partition, "a finished partition moved on")
    return report


def _check_event_batches(
    source: Source[Any], partition: Partition, start: Offset, end: Offset, read: list[Any]
) -> None:
    """A source with compact batches gives in them exactly what ``read`` gives for the range."""
    if not isinstance(source, ReadsEventBatches):
        return
    batches = source.read_event_batches(partition, start, end, max(1, len(read) // 3))
    if batches is not None:
        compact = _comparable(record for batch in batches for record in batch.records())
        _require(compact == read, partition, f"read_event_batches({start}, {end}] differs from read")


def _check_offset(partition: Partition, offset: Offset) -> None:
    try:
        text = json.dumps(offset, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise SourceContractViolationError(f"partition {partition.id}: offset {offset!r} is not JSON: {exc}") from exc
    _require(json.loads(text) == offset, partition, f"offset {offset!r} does not survive a JSON round trip")
