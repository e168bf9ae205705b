"""Segment tracking (``cassandra_commitlog.cdc_raw``) over a cdc_raw folder of a segment Cassandra wrote:
which segments count as closed, which a committed position has finished, and where a finished
segment goes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import pytest

from cdcflow.sources.cassandra_commitlog.cdc_index import CdcIndex
from cdcflow.sources.cassandra_commitlog.cdc_raw import CLOSED_WITHOUT_INDEX, CdcRawSegments, Position
from cdcflow.sources.cassandra_commitlog.segment import SegmentRead, read_entries
from tests.paths import COMMITLOG_FIXTURES

FIXTURE = next((COMMITLOG_FIXTURES / "v7").glob("CommitLog-*.log"))


def _synced_end(data: bytes) -> int:
    """Where the fixture's last section ends: the offset of the COMPLETED index Cassandra writes."""
    state = SegmentRead()
    for _ in read_entries(data, state=state):
        pass
    assert state.clean_end
    return state.read_to


def _segment(cdc_raw: Path, segment_id: int, index: str | None, data: bytes | None = None) -> Path:
    path = cdc_raw / f"CommitLog-7-{segment_id}.log"
    path.write_bytes(FIXTURE.read_bytes() if data is None else data)
    if index is not None:
        (cdc_raw / f"CommitLog-7-{segment_id}_cdc.idx").write_text(index)
    return path


def _tracking(cdc_raw: Path, processed: Literal["delete", "archive", "keep"] = "delete") -> CdcRawSegments:
    return CdcRawSegments(cdc_raw, processed, None, logging.getLogger("test"), "node1")


def test_a_segment_without_an_index_counts_as_closed_once_a_newer_one_has_one(tmp_path: Path) -> None:
    _segment(tmp_path, 1, None)
    _segment(tmp_path, 2, "100")
    _segment(tmp_path, 3, None)  # created ahead of time: no index yet, and none newer has one
    indexes = {segment_id: index for segment_id, _, index in _tracking(tmp_path).indexed(0)}
    assert indexes == {1: CLOSED_WITHOUT_INDEX, 2: CdcIndex(100, False), 3: None}
    assert _tracking(tmp_path).oldest_with_cdc_data() == 2  # an assumed index holds no CDC data


def test_a_committed_position_finishes_the_completed_segments_it_read_to_their_end(tmp_path: Path) -> None:
    _segment(tmp_path, 1, "500\nCOMPLETED")
    _segment(tmp_path, 2, "700\nCOMPLETED")
    _segment(tmp_path, 3, "900")  # still being written
    tracking = _tracking(tmp_path)

    def finished(segment: int, position: int) -> list[int]:
        return [segment_id for segment_id, _, _ in tracking.finished(Position(segment, position))]

    assert finished(1, 499) == []
    assert finished(2, 699) == [1]
    assert finished(2, 700) == [1, 2]
    assert finished(3, 10_000) == [1, 2]  # never one Cassandra has not completed


@pytest.mark.parametrize("processed", ["delete", "archive", "keep"])
def test_a_finished_segment_is_deleted_archived_or_kept_with_its_index(
    tmp_path: Path, processed: Literal["delete", "archive", "keep"]
) -> None:
    cdc_raw = tmp_path / "cdc_raw"
    cdc_raw.mkdir()
    data = FIXTURE.read_bytes()
    path = _segment(cdc_raw, 1, f"{_synced_end(data)}\nCOMPLETED")
    [(_, _, index)] = [(s, p, i) for s, p, i in _tracking(cdc_raw).indexed(0)]
    assert index is not None
    _tracking(cdc_raw, processed).retire(path, index)
    left = sorted(p.name for p in cdc_raw.iterdir())
    archived = sorted(p.name for p in (tmp_path / "cdc_archive").glob("*")) if processed == "archive" else []
    names = [path.name, f"{path.stem}_cdc.idx"]
    assert (left, archived) == {"delete": ([], []), "archive": ([], names), "keep": (names, [])}[processed]
    assert not (tmp_path / "cdc_unreadable").exists()


@pytest.mark.parametrize("processed", ["delete", "archive", "keep"])
def test_a_cut_segment_moves_to_cdc_unreadable_whatever_processed_segments_says(
    tmp_path: Path, processed: Literal["delete", "archive", "keep"]
) -> None:
    cdc_raw = tmp_path / "cdc_raw"
    cdc_raw.mkdir()
    data = FIXTURE.read_bytes()
    synced = _synced_end(data)
    path = _segment(cdc_raw, 1, f"{synced}\nCOMPLETED", data[: synced // 2])  # the file ends before the index
    _tracking(cdc_raw, processed).retire(path, CdcIndex(synced, True))
    assert list(cdc_raw.iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "cdc_unreadable").iterdir()) == [path.name, f"{path.stem}_cdc.idx"]
