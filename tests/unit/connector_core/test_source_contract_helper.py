"""cdcflow.testing catches sources that break the contract, and passes datagen."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdcflow.batches import EventBatch
from cdcflow.contract import Offset, Partition, PluginContext
from cdcflow.events import Record
from cdcflow.native import native_module
from cdcflow.sources.datagen import DatagenConfig, DatagenSource
from cdcflow.testing import SourceContractViolationError, check_source_contract

CONTEXT = PluginContext("t", Path("t.yaml"))


class SteppingClock:
    """Each reading is a second later: with a rate, datagen's event times are then fixed per event."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def rated(source_cls: type[DatagenSource], count: int, partitions: int) -> DatagenSource:
    config = DatagenConfig(type="datagen", count=count, partitions=partitions, rate=1000.0)
    return source_cls(config, CONTEXT, clock=SteppingClock())


def test_datagen_keeps_the_contract() -> None:
    source = rated(DatagenSource, count=900, partitions=3)
    report = check_source_contract(source, max_records=100, cycles=10)
    assert report.partitions == 3
    assert report.records == 900  # every partition read to its end: 3 x 300


class ForgetfulDatagen(DatagenSource):
    """Reads a different payload every time: what a source reading 'latest state' would do."""

    _draws = itertools.count()

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        for record in super().read(partition, start, end):
            yield record.with_changes(key={"id": next(self._draws)})  # type: ignore[union-attr]


class BackwardsWatermark(DatagenSource):
    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        return -int(offset["seq"])


class BatchesLoseAnEvent(DatagenSource):
    """Its compact batches leave out a range's first event that ``read`` gives."""

    def read_event_batches(
        self, partition: Partition, start: Offset, end: Offset, batch_size: int
    ) -> Iterator[EventBatch] | None:
        batches = super().read_event_batches(partition, {**start, "seq": start["seq"] + 1}, end, batch_size)
        assert batches is not None, "the compiled core builds datagen's batches"
        return batches


@pytest.mark.parametrize(
    ("source_cls", "rule"),
    [
        (ForgetfulDatagen, "not deterministic"),
        (BackwardsWatermark, "watermark went back"),
        pytest.param(
            BatchesLoseAnEvent,
            "read_event_batches.* differs from read",
            marks=pytest.mark.skipif(native_module() is None, reason="datagen's batches need the compiled core"),
        ),
    ],
)
def test_broken_sources_are_named_with_the_rule(source_cls: type[DatagenSource], rule: str) -> None:
    source = rated(source_cls, count=300, partitions=1)
    with pytest.raises(SourceContractViolationError, match=f"partition datagen-0: .*{rule}"):
        check_source_contract(source)
