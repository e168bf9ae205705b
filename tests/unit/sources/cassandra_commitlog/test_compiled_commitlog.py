"""The compiled core's commit-log reader gives exactly what the pure-Python reference gives.

Random tables of every CQL type, random mutations of them (rows, deletions of every kind, TTLs,
collections element by element, dropped columns, wide tables), the same bytes damaged, the real
segments of tests/fixtures/commitlog and those damaged: wherever the reference decodes, the
compiled decoder must give the same row changes (values, their types, dict order); wherever the
reference raises, the compiled one must decline, so the reference's error is what gets stored.
Skipped when the compiled core is not built (or CDCFLOW_PURE_PYTHON=1).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.native import native_module
from cdcflow.sources.cassandra_commitlog.changes import row_changes
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError, MutationDecodeError
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema
from cdcflow.sources.cassandra_commitlog.segment import (
    Entry,
    EntryFault,
    SegmentRead,
    read_entries,
    read_framed,
)
from tests.commitlog_writer import catalogs, mutations
from tests.paths import COMMITLOG_FIXTURES

NATIVE = native_module()
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the compiled core (cdcflow._native) is not built")

if NATIVE is not None:
    from cdcflow.sources.cassandra_commitlog.compiled import CompiledDecoder, CompiledFramer

FORMATS = sorted(p.name for p in COMMITLOG_FIXTURES.iterdir() if (p / "schema.json").exists())


def _everything(table: TableSchema) -> bool:
    return True


def _not_schema(table: TableSchema) -> bool:
    # As the source: system_schema updates feed schema-change events, which the reference decodes.
    return table.keyspace != "system_schema"


def _comparable(updates: list[tuple[TableSchema, bytes, list[Any]]]) -> list[tuple[str, bytes, list[str]]]:
    # repr: values with their types (1 is not 1.0 nor True), NaN equal to NaN, dicts in their order.
    return [(table.table_id, key, [repr(change) for change in changes]) for table, key, changes in updates]


def _reference(catalog: SchemaCatalog, version: int, mutation: bytes, wanted: Any = _everything) -> Any:
    """The reference's decoded updates, or the MutationDecodeError it raises (what the source
    stores for a mutation that does not decode); any other exception is a bug, and fails the test."""
    try:
        decoded = MutationDecoder(catalog, version, wanted).decode(mutation)
        return _comparable([(u.table, u.key, list(row_changes(u))) for u in decoded.updates])
    except MutationDecodeError as exc:
        return exc


def _assert_same(catalog: SchemaCatalog, version: int, mutation: bytes, wanted: Any = _everything) -> bool:
    """Asserts the compiled decoder agrees with the reference; True when the reference decoded."""
    expected = _reference(catalog, version, mutation, wanted)
    decoder = CompiledDecoder(catalog, wanted, NATIVE)
    compiled = decoder.decode(mutation)
    if isinstance(expected, Exception):
        assert compiled is None, f"the reference raised {expected!r}, the compiled core decoded {compiled!r}"
        return False
    assert compiled is not None, f"the compiled core declined ({decoder.last_decline}) what the reference decodes"
    assert _comparable(compiled) == expected
    return True


@pytest.mark.parametrize("name", FORMATS)
def test_every_fixture_mutation_decodes_as_the_reference_decodes_it(name: str) -> None:
    [segment] = sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log"))
    catalog = SchemaCatalog.load(COMMITLOG_FIXTURES / name / "schema.json")
    version = int(name[1])  # v7, v7-zstd, v8, v8-lz4, ...
    entries = [e for e in read_entries(segment.read_bytes()) if isinstance(e, Entry)]
    assert entries and all(_assert_same(catalog, version, e.mutation, _not_schema) for e in entries)
    # Wanted system_schema updates are left to the reference, which decodes them.
    declined = [e for e in entries if CompiledDecoder(catalog, _everything, NATIVE).decode(e.mutation) is None]
    assert declined and all(not isinstance(_reference(catalog, version, e.mutation), Exception) for e in declined)


# Each property test counts what its examples came to (both sides decoded, or the reference
# raised and the compiled core declined) and requires enough of each: an example that compares
# nothing must not let the test pass.
_PROPERTY = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def test_random_mutations_of_random_tables_decode_the_same() -> None:
    decoded: Counter[str] = Counter()

    @_PROPERTY
    @given(data=st.data(), catalog=catalogs())
    def decode_the_same(data: st.DataObject, catalog: SchemaCatalog) -> None:
        mutation = data.draw(mutations(catalog))
        version = data.draw(st.sampled_from([7, 8]))
        # A sound mutation of the catalog's tables: the reference decodes it.
        assert _assert_same(catalog, version, mutation), "the reference refused a sound mutation"
        # Only some tables wanted: the others are parsed past, the last one not even parsed.
        first = min(catalog.tables)
        assert _assert_same(catalog, version, mutation, lambda table: table.table_id == first)
        decoded[f"v{version}"] += 1

    decode_the_same()
    # 200 examples; a run gave v7 135, v8 65 (Hypothesis draws the first choice more often).
    assert decoded.total() >= 150 and decoded["v7"] >= 20 and decoded["v8"] >= 20, decoded


def test_unsound_and_damaged_mutations_are_declined_exactly_where_the_reference_raises() -> None:
    outcomes: Counter[str] = Counter()

    @_PROPERTY
    @given(data=st.data(), catalog=catalogs())
    def declined_where_the_reference_raises(data: st.DataObject, catalog: SchemaCatalog) -> None:
        mutation = bytearray(data.draw(mutations(catalog, sound=False)))
        for _ in range(data.draw(st.integers(0, 3))):
            mutation[data.draw(st.integers(0, len(mutation) - 1))] ^= data.draw(st.integers(1, 255))
        cut = data.draw(st.one_of(st.none(), st.integers(0, len(mutation))))
        decodes = _assert_same(catalog, 8, bytes(mutation[:cut] if cut is not None else mutation))
        outcomes["decoded" if decodes else "declined"] += 1

    declined_where_the_reference_raises()
    # Both outcomes compared often (a run: 89 decoded, 111 declined of 200).
    assert outcomes["decoded"] >= 30 and outcomes["declined"] >= 30, outcomes


# --- framing ----------------------------------------------------------------------------------------


def _framed(data: bytes, compiled: bool, after: int = 0, durable_to: int | None = None) -> tuple[Any, ...]:
    state = SegmentRead()
    items: list[tuple[Any, ...]] = []
    if compiled:
        framer = CompiledFramer(NATIVE, after)
        iterator = read_framed(data, "s.log", framer, after=after, durable_to=durable_to, state=state)
    else:
        iterator = read_entries(data, "s.log", after=after, durable_to=durable_to, state=state)
    error: Any = None
    try:
        for item in iterator:
            if isinstance(item, EntryFault):
                items.append(("fault", item.start, item.end, item.raw, type(item.error), str(item.error)))
            else:
                items.append(("entry", item.start, item.end, item.mutation))
    except Exception as exc:  # a header the reference refuses: both must refuse it alike
        error = (type(exc), str(exc))
    section_error = (type(state.section_error), str(state.section_error)) if state.section_error else None
    return items, error, state.read_to, state.clean_end, section_error


@pytest.mark.parametrize("name", FORMATS)
def test_framing_gives_the_reference_entries_and_state(name: str) -> None:
    [segment] = sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log"))
    data = segment.read_bytes()
    everything = _framed(data, compiled=False)
    assert _framed(data, compiled=True) == everything
    middle = everything[0][len(everything[0]) // 2][2]
    assert _framed(data, True, after=middle) == _framed(data, False, after=middle)
    assert _framed(data, True, durable_to=middle) == _framed(data, False, durable_to=middle)


_SEEDS = {
    name: next(iter(sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log")))).read_bytes()[:65536]
    for name in FORMATS
}


def test_damaged_segments_frame_and_fail_as_the_reference_does() -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        name=st.sampled_from(FORMATS),
        flips=st.lists(st.tuples(st.integers(0, 65535), st.integers(1, 255)), min_size=1, max_size=8),
        cut=st.one_of(st.none(), st.integers(0, 65536)),
    )
    def frame_and_fail_alike(name: str, flips: list[tuple[int, int]], cut: int | None) -> None:
        data = bytearray(_SEEDS[name])
        for position, mask in flips:
            data[position % len(data)] ^= mask
        if cut is not None:
            del data[cut:]
        framed = _framed(bytes(data), compiled=True)
        assert framed == _framed(bytes(data), compiled=False)
        outcomes["framed entries"] += sum(item[0] == "entry" for item in framed[0])
        catalog = SchemaCatalog.load(COMMITLOG_FIXTURES / name / "schema.json")
        entries: list[Entry] = []
        with contextlib.suppress(CommitLogError):  # a header nothing reads: compared above
            entries += [item for item in read_entries(bytes(data)) if isinstance(item, Entry)]
        for entry in entries:
            decodes = _assert_same(catalog, int(name[1]), entry.mutation, _not_schema)
            outcomes["decoded entries" if decodes else "declined entries"] += 1

    frame_and_fail_alike()
    # Entries framed and decoded alike, past the damage (a run: 7,873 of each over 200 examples).
    assert outcomes["framed entries"] >= 1000 and outcomes["decoded entries"] >= 1000, outcomes
