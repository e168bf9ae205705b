"""A commit-log segment cut short, with segments the real Cassandra node wrote (CDC on, 1 MiB segments).

Rows are written until the node closes a segment holding them (``COMPLETED`` in its ``_cdc.idx``)
and a later segment holds more; copies of those segments, one cut at several places (mid-header,
mid-entry, at an entry boundary short of the index's offset), go into a cdc_raw of the test's own,
which the ``cassandra_commitlog`` source reads as a pipeline does (compact batches, else ``read``;
commit after each range). The node's own cdc_raw is only read. Both the compiled core and the
pure-Python reference (``CDCFLOW_PURE_PYTHON=1``) run each case.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdcflow.sources.cassandra_commitlog.cdc_index import index_path, parse_cdc_index
from cdcflow.sources.cassandra_commitlog.changes import row_changes
from cdcflow.sources.cassandra_commitlog.exceptions import UnknownTableError
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, load_schema_catalog
from cdcflow.sources.cassandra_commitlog.segment import Entry, SegmentRead, read_entries, read_segment_header
from tests.integration.commitlog_helpers import segments

NODE = "node1"
PAYLOAD = 24 << 10  # bytes per row: about 40 rows fill one of the node's 1 MiB segments


@dataclass(frozen=True)
class _Copy:
    name: str
    data: bytes
    index: str  # the _cdc.idx text, as the node wrote it


@dataclass(frozen=True)
class _Written:
    """Copies of the node's segments holding the test's rows: ``closed`` is COMPLETED, ``later`` after it."""

    keyspace: str
    closed: _Copy
    later: list[_Copy]
    catalog: SchemaCatalog


def _index_offset(text: str, completed: bool | None = None) -> int:
    index = parse_cdc_index(text)
    assert index is not None and (completed is None or index.completed == completed)
    return index.offset


def _row_ids(
    data: bytes, catalog: SchemaCatalog, keyspace: str, durable_to: int | None = None
) -> list[tuple[int, int]]:
    """(entry end, id) of every change to ``keyspace.cut`` in a segment's bytes, by the reference reader."""
    found: list[tuple[int, int]] = []
    state = SegmentRead()
    decoder: MutationDecoder | None = None
    for item in read_entries(data, durable_to=durable_to, state=state):
        if not isinstance(item, Entry):
            continue
        assert state.header is not None
        decoder = decoder or MutationDecoder(catalog, state.header.version, lambda t: t.keyspace == keyspace)
        try:
            mutation = decoder.decode(item.mutation, "copy", item.end)
        except UnknownTableError:  # another test's table, created since the catalog was read
            continue
        found += [(item.end, change.key["id"]) for u in mutation.updates for change in row_changes(u)]
    return found


def _copy(path: Path) -> _Copy | None:
    # The index first: Cassandra writes it only after the bytes it counts, so the file read after
    # it holds at least as much.
    try:
        index = index_path(path).read_text()
        return _Copy(path.name, path.read_bytes(), index)
    except FileNotFoundError:  # no index yet, or another test's pipeline consumed the segment
        return None


@pytest.fixture(scope="module")
def written(cassandra_session: Any, cdc_raw_dir: Path) -> Iterator[_Written]:
    session = cassandra_session
    keyspace = f"k{uuid.uuid4().hex[:10]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.cut (id int PRIMARY KEY, payload blob) WITH cdc = true")
    insert = session.prepare(f"INSERT INTO {keyspace}.cut (id, payload) VALUES (?, ?)")
    catalog = load_schema_catalog(session)
    deadline = time.monotonic() + 120
    next_id = 0
    try:
        while time.monotonic() < deadline:
            for _ in range(20):
                session.execute(insert, (next_id, os.urandom(PAYLOAD)))
                next_id += 1
            time.sleep(1.5)  # a commitlog_sync_period: the indexes catch up
            holding = []
            for copy in filter(None, map(_copy, segments(cdc_raw_dir))):
                index = parse_cdc_index(copy.index)
                rows = _row_ids(copy.data, catalog, keyspace, durable_to=index.offset) if index is not None else []
                if index is not None and rows:
                    holding.append((index.completed and len(rows) >= 3, copy))
            closed = [number for number, (cuttable, _) in enumerate(holding) if cuttable]
            if closed and closed[0] < len(holding) - 1:
                # A closed segment with rows enough to cut between (a DROP elsewhere closes segments
                # early), and later ones with more: what the tests cut and follow.
                first = closed[0]
                yield _Written(keyspace, holding[first][1], [copy for _, copy in holding[first + 1 :]], catalog)
                return
        pytest.fail(f"the node closed no segment holding rows of {keyspace}.cut within 120 s ({next_id} rows)")
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")


def _segment_id(path: Path) -> int:
    return int(path.stem.rsplit("-", 1)[1])


def _cuts(written: _Written) -> dict[str, int]:
    """Where the closed segment is cut: each place short of its index's offset."""
    data = written.closed.data
    ends = {end for end, _ in _row_ids(data, written.catalog, written.keyspace)}
    ours = [e for e in read_entries(data) if isinstance(e, Entry) and e.end in ends]
    return {
        "mid-header": read_segment_header(data).size - 5,
        "mid-entry": ours[len(ours) // 2].end - 100,  # inside one row's payload
        "entry boundary": ours[len(ours) // 3].end,
    }


def _before(written: _Written, cut: int) -> list[int]:
    return [row for end, row in _row_ids(written.closed.data, written.catalog, written.keyspace) if end <= cut]


def _later(written: _Written) -> list[int]:
    found = []
    for copy in written.later:
        offset = _index_offset(copy.index)
        found += [row for _, row in _row_ids(copy.data, written.catalog, written.keyspace, durable_to=offset)]
    return found


@pytest.fixture(params=["compiled", "pure-python"])
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The compiled core, or the pure-Python reference (CDCFLOW_PURE_PYTHON=1), for the source built next."""
    from cdcflow.native import PURE_PYTHON_ENV, native_module

    if request.param == "pure-python":
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    native_module.cache_clear()
    if request.param == "compiled" and native_module() is None:
        pytest.skip("the compiled core is not built")
    yield request.param
    monkeypatch.undo()
    native_module.cache_clear()


def _cdc_raw(folder: Path, written: _Written, cut: int | None, completed: bool = True) -> tuple[Path, Path]:
    """A cdc_raw holding the closed segment (cut at ``cut``; its index as the node wrote it, or
    without COMPLETED) and the later ones whole; returns it and the closed segment's path."""
    cdc_raw = folder / "cdc_raw"
    cdc_raw.mkdir(parents=True)
    for copy in [written.closed, *written.later]:
        path = cdc_raw / copy.name
        closed = copy is written.closed
        path.write_bytes(copy.data[:cut] if closed and cut is not None else copy.data)
        index_path(path).write_text(copy.index if completed or not closed else copy.index.split("\n")[0])
    return cdc_raw, cdc_raw / written.closed.name


def _source(
    folder: Path, cdc_raw: Path, keyspace: str, error_store: dict[str, str] | None = None
) -> tuple[Any, str, Path]:
    """The source, its pipeline's name, and a pipeline file naming the same source (for the CLI)."""
    from cdcflow.contract import PluginContext
    from cdcflow.sources.cassandra_commitlog import CassandraCommitLogSource, CassandraCommitLogSourceConfig

    section = {
        "type": "cassandra_commitlog",
        "cdc_raw": str(cdc_raw),
        "node": NODE,
        "tables": [f"{keyspace}.cut"],
        "error_store": error_store or {"type": "file", "path": str(folder / "errors.jsonl")},
    }
    name = f"cut-{uuid.uuid4().hex[:8]}"
    pipeline = folder / "pipeline.yaml"
    sink = {"type": "file", "path": str(folder / "out.jsonl")}
    checkpoint = {"type": "file", "path": str(folder / "state")}
    pipeline.write_text(json.dumps({"name": name, "source": section, "sink": sink, "checkpoint": checkpoint}))
    config = CassandraCommitLogSourceConfig.model_validate(section)
    return CassandraCommitLogSource(config, PluginContext(name, pipeline)), name, pipeline


def _follow(source: Any, rounds: int, offset: Any = None) -> tuple[list[int], Any]:
    """What a pipeline does, range by range of at most 8 entries: compact batches when the source
    gives them, else read; commit after each range. The ids of the rows read, and the last offset."""
    [partition] = source.partitions()
    offset = offset if offset is not None else source.initial_offset(partition)
    ids: list[int] = []
    for _ in range(rounds):
        end = source.latest_offset(partition, offset, 8)
        if end == offset:
            break
        batches = source.read_event_batches(partition, offset, end, 16)
        if batches is not None:
            events: Any = [event for batch in batches for event in batch.records()]
        else:
            events = source.read(partition, offset, end)
        ids += [event.after["id"] for event in events if getattr(event, "after", None)]
        source.commit({partition.id: end})
        offset = end
    return ids, offset


def _kept_and_dumped(
    pipeline: Path, segment: str, keyspace: str, capsys: pytest.CaptureFixture[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """``cdcflow commitlog kept PIPELINE``, then ``dump SEGMENT --error-store PIPELINE`` (exit 1: the
    cut is a fault): the segments listed, the dump's lines, and the ids of ``keyspace.cut``'s changes."""
    from cdcflow.cli import main

    capsys.readouterr()
    assert main(["commitlog", "kept", str(pipeline)]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["commitlog", "dump", segment, "--error-store", str(pipeline)]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ids = [
        change["key"]["id"]
        for line in lines
        for change in line.get("changes", [])
        if (change["keyspace"], change["table"]) == (keyspace, "cut")
    ]
    return listed, lines, ids


@pytest.mark.parametrize("place", ["mid-header", "mid-entry", "entry boundary"])
def test_a_cut_segment_is_kept_whole_counted_and_logged_and_the_stream_goes_on(
    tmp_path: Path,
    written: _Written,
    core: str,
    place: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cdcflow.metrics import source_counter
    from cdcflow.sources.cassandra_commitlog.error_store import FileErrorStore

    cut = _cuts(written)[place]
    offset = _index_offset(written.closed.index, completed=True)
    cdc_raw, closed = _cdc_raw(tmp_path, written, cut)
    source, name, pipeline = _source(tmp_path, cdc_raw, written.keyspace)
    counted = source_counter(name, "segment_cut_short")
    later = _later(written)
    assert later, "the later segments hold rows"
    source.open()
    try:
        with caplog.at_level(logging.WARNING, logger="cdcflow"):
            ids, _ = _follow(source, rounds=500)
    finally:
        source.close()

    # The changes before the cut, then the later segments': the stream went on past the cut one.
    assert ids == _before(written, cut) + later
    # Nothing deleted or archived: the file left cdc_raw for cdc_unreadable/ as it was, with its index.
    assert not closed.exists() and not (tmp_path / "cdc_archive").exists()
    aside = tmp_path / "cdc_unreadable" / closed.name
    assert aside.read_bytes() == written.closed.data[:cut]
    assert index_path(aside).read_text() == written.closed.index
    # The error store keeps the segment and its index, and has a record of the cut.
    kept = FileErrorStore(tmp_path / "errors.jsonl").kept_segment(NODE, _segment_id(closed))
    assert kept.data == written.closed.data[:cut] and kept.info.index == written.closed.index
    records = [json.loads(line) for line in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert [r["segment"] for r in records if "cut short" in r["error"]] == [_segment_id(closed)]
    # Counted once, however many ranges read the segment; logged with its path, offset and size.
    assert counted._value.get() == 1
    [logged] = [r for r in caplog.records if "cut short" in r.getMessage()]
    assert logged.levelno == logging.ERROR
    assert all(part in logged.getMessage() for part in (str(closed), f"position {offset}", f"has {cut} bytes"))

    # Read again later, from the error store: the same changes up to the cut, then the cut itself.
    listed, lines, dumped = _kept_and_dumped(pipeline, closed.name, written.keyspace, capsys)
    assert [(k["node"], k["segment"], k["size"]) for k in listed] == [(NODE, _segment_id(closed), cut)]
    assert dumped == _before(written, cut)
    assert lines[-1]["position"] <= cut and "cut short" in lines[-1]["error"] and lines[-1]["cdc_index"] == offset


def test_a_short_segment_still_being_written_is_waited_for_then_kept_once_completed(
    tmp_path: Path, written: _Written
) -> None:
    from cdcflow.metrics import source_counter

    cut = _cuts(written)["mid-entry"]
    cdc_raw, closed = _cdc_raw(tmp_path, written, cut, completed=False)
    source, name, _ = _source(tmp_path, cdc_raw, written.keyspace)
    counted = source_counter(name, "segment_cut_short")
    source.open()
    try:
        ids, offset = _follow(source, rounds=500)
        # Not COMPLETED: its file may still grow. The stream waits in it (its sections wholly there
        # read, the one the file ends in not yet); nothing is kept or moved.
        assert ids == _before(written, cut)[: len(ids)]
        assert offset["segment"] == _segment_id(closed) and offset["position"] <= cut
        assert _follow(source, rounds=5, offset=offset) == ([], offset)
        assert closed.exists() and counted._value.get() == 0
        errors = tmp_path / "errors.jsonl"
        assert not errors.exists() or "cut short" not in errors.read_text()
        # Cassandra closes it: now its file is known to be cut, and the stream goes on past it.
        index_path(closed).write_text(written.closed.index)
        rest, _ = _follow(source, rounds=500, offset=offset)
    finally:
        source.close()
    assert ids + rest == _before(written, cut) + _later(written) and counted._value.get() == 1
    assert not closed.exists() and (tmp_path / "cdc_unreadable" / closed.name).exists()


def test_whole_segments_are_read_and_deleted_as_before(tmp_path: Path, written: _Written) -> None:
    """The same segments uncut: every row read, the closed segment deleted, nothing kept."""
    cdc_raw, closed = _cdc_raw(tmp_path, written, None)
    source, _, _ = _source(tmp_path, cdc_raw, written.keyspace)
    source.open()
    try:
        ids, _ = _follow(source, rounds=500)
    finally:
        source.close()
    assert ids == _before(written, len(written.closed.data)) + _later(written)
    assert not closed.exists() and not (tmp_path / "cdc_unreadable").exists()
    assert not (tmp_path / "errors.jsonl.segments").exists()


def test_the_cassandra_error_store_keeps_a_cut_segment_in_chunks_and_the_cli_reads_it_back(
    tmp_path: Path, written: _Written, cassandra_session: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default store: a table of its own beside the error records, the segment in chunks a
    mutation of the node (1 MiB segments: at most 512 KiB) can hold."""
    from cdcflow.cli import main
    from cdcflow.sources.cassandra_commitlog.error_store import CassandraErrorStore, KeptSegment, KeptSegmentInfo

    store_keyspace = f"k{uuid.uuid4().hex[:10]}"
    cut = _cuts(written)["mid-entry"]
    cdc_raw, closed = _cdc_raw(tmp_path, written, cut)
    store = {"type": "cassandra", "keyspace": store_keyspace}
    source, _, pipeline = _source(tmp_path, cdc_raw, written.keyspace, store)
    source.open()
    try:
        ids, _ = _follow(source, rounds=500)
        assert ids == _before(written, cut) + _later(written)
        kept_store = CassandraErrorStore(cassandra_session, store_keyspace, "commitlog_errors")
        kept = kept_store.kept_segment(NODE, _segment_id(closed))
        assert kept.data == written.closed.data[:cut] and kept.info.index == written.closed.index
        # A whole 1 MiB segment the node wrote goes in four chunks and comes back the same.
        [whole] = sorted((Path(__file__).parents[1] / "fixtures" / "commitlog" / "v7").glob("CommitLog-*.log"))
        info = KeptSegmentInfo("elsewhere", 7, whole.name, whole.stat().st_size, "83896\nCOMPLETED", "a test")
        kept_store.keep_segment(KeptSegment(info, whole.read_bytes()))
        assert kept_store.kept_segment("elsewhere", 7) == KeptSegment(info, whole.read_bytes())
        chunks = cassandra_session.execute(
            f"SELECT chunk FROM {store_keyspace}.commitlog_errors_segments WHERE node = 'elsewhere' AND segment = 7"
        )
        assert [row.chunk for row in chunks] == [0, 1, 2, 3]

        listed, lines, dumped = _kept_and_dumped(pipeline, str(_segment_id(closed)), written.keyspace, capsys)
        assert [(k["node"], k["segment"], k["size"]) for k in listed] == [
            ("elsewhere", 7, info.size),
            (NODE, _segment_id(closed), cut),
        ]
        assert dumped == _before(written, cut) and "cut short" in lines[-1]["error"]
        assert main(["commitlog", "dump", "12345", "--error-store", str(pipeline)]) == 1  # not kept: says so
        assert "no kept copy of node node1's segment 12345" in capsys.readouterr().err
    finally:
        source.close()
        cassandra_session.execute(f"DROP KEYSPACE IF EXISTS {store_keyspace}")
