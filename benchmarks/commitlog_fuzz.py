"""Fuzz the commit-log parser: damaged real segments must only ever raise the parser's own errors.

Takes every fixture segment (versions 7 and 8, plain and compressed, written by real 5.0 nodes),
damages it at random (flipped bytes, runs of zeros or garbage, truncation), and parses and decodes
what is left. Any exception that is not a ``CommitLogError`` is a bug: it is printed with the seed
that reproduces it and the script exits 1. With the compiled core built, every case is also read
through it (framing, decoding, the reference for what it declines, as the source reads) and must
give exactly the reference's entries, faults, row changes and errors; the process must survive.

    python benchmarks/commitlog_fuzz.py --seconds 180 [--core both|python|compiled]
"""

from __future__ import annotations

import argparse
import random
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from cdcflow.native import native_module
from cdcflow.sources.cassandra_commitlog.changes import row_changes
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog
from cdcflow.sources.cassandra_commitlog.segment import Entry, EntryFault, SegmentRead, read_entries, read_framed

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "commitlog"


def _damage(data: bytes, rng: random.Random) -> bytes:
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        at = rng.randrange(len(damaged))
        if kind < 0.6:
            damaged[at] ^= rng.randint(1, 255)
        elif kind < 0.75:
            length = rng.randint(1, 64)
            damaged[at : at + length] = bytes(len(damaged[at : at + length]))
        elif kind < 0.9:
            length = rng.randint(1, 64)
            damaged[at : at + length] = rng.randbytes(len(damaged[at : at + length]))
        else:
            del damaged[at:]
            if not damaged:
                break
    return bytes(damaged)


def _parse(data: bytes, catalog: SchemaCatalog, outcomes: Counter[str]) -> None:
    state = SegmentRead()
    try:
        for item in read_entries(data, state=state):
            if isinstance(item, EntryFault):
                outcomes[type(item.error).__name__] += 1
                continue
            assert isinstance(item, Entry) and state.header is not None
            try:
                for update in MutationDecoder(catalog, state.header.version).decode(item.mutation).updates:
                    list(row_changes(update))
                outcomes["mutation decoded"] += 1
            except CommitLogError as exc:
                outcomes[type(exc).__name__] += 1
    except CommitLogError as exc:
        outcomes[type(exc).__name__] += 1
    if state.section_error is not None:
        outcomes["CorruptSectionError"] += 1


def _outcome(data: bytes, catalog: SchemaCatalog, native: Any | None) -> list[Any]:
    """What reading ``data`` gives, item by item, through the reference (``native`` None) or the
    compiled core (and the reference for what it declines, as the source reads)."""
    from cdcflow.sources.cassandra_commitlog.compiled import CompiledDecoder, CompiledFramer

    seen: list[Any] = []
    state = SegmentRead()
    wanted = lambda table: table.keyspace != "system_schema"  # noqa: E731 - as the source decodes them
    try:
        if native is None:
            items: Any = read_entries(data, "fuzz.log", state=state)
        else:
            decoder = CompiledDecoder(catalog, wanted, native)
            items = read_framed(data, "fuzz.log", CompiledFramer(native, 0, lambda: decoder), state=state)
        for item in items:
            if isinstance(item, EntryFault):
                seen.append(("fault", item.start, item.end, item.raw, str(item.error)))
                continue
            changes = getattr(item, "changes", None)
            if changes is None:
                assert state.header is not None and item.mutation is not None
                try:
                    mutation = MutationDecoder(catalog, state.header.version, wanted).decode(item.mutation)
                    changes = [(u.table, u.key, list(row_changes(u))) for u in mutation.updates]
                except CommitLogError as exc:
                    seen.append(("error", item.end, str(exc)))
                    continue
            seen.append(("entry", item.end, [(t.table_id, k, [repr(c) for c in cs]) for t, k, cs in changes]))
    except CommitLogError as exc:
        seen.append(("segment", str(exc)))
    return [*seen, ("state", state.read_to, state.clean_end, str(state.section_error))]


def _parse_mutation(mutation: bytes, version: int, catalog: SchemaCatalog, outcomes: Counter[str]) -> None:
    # CRCs catch nearly all damage on disk, so the decoder also gets damaged bytes directly: what a
    # CRC collision, or a bug in the writer, would hand it.
    try:
        for update in MutationDecoder(catalog, version).decode(mutation).updates:
            list(row_changes(update))
        outcomes["damaged mutation decoded"] += 1
    except CommitLogError as exc:
        outcomes[f"{type(exc).__name__} (direct)"] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--core", choices=["both", "python", "compiled"], default="both")
    args = parser.parse_args()
    native = native_module() if args.core != "python" else None
    if args.core == "compiled" and native is None:
        print("the compiled core (cdcflow._native) is not built")
        return 1
    seeds = []
    mutations: list[tuple[str, bytes, int, SchemaCatalog]] = []
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "schema.json").exists()):
        [segment] = sorted(folder.glob("CommitLog-*.log"))
        data = segment.read_bytes()
        # Uncompressed fixtures are mostly zeroed tail; damage lands where the data is.
        used = SegmentRead()
        for _ in read_entries(data, state=used):
            pass
        catalog = SchemaCatalog.load(folder / "schema.json")
        seeds.append((folder.name, data[: max(used.read_to + 64, 4096)], catalog))
        assert used.header is not None
        mutations.extend(
            (folder.name, e.mutation, used.header.version, catalog) for e in read_entries(data) if isinstance(e, Entry)
        )
    rng = random.Random(args.seed)
    outcomes: Counter[str] = Counter()
    cases = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        case_seed = rng.randrange(1 << 32)
        name, data, catalog = seeds[case_seed % len(seeds)]
        case_rng = random.Random(case_seed)
        mutation_name, mutation, version, mutation_catalog = mutations[case_seed % len(mutations)]
        try:
            damaged = _damage(data, case_rng)
            if args.core != "compiled":
                _parse(damaged, catalog, outcomes)
            if native is not None:
                compiled = _outcome(damaged, catalog, native)
                if args.core == "both" and compiled != _outcome(damaged, catalog, None):
                    raise AssertionError("the compiled core read the damaged segment differently from the reference")
                outcomes["compared with the compiled core" if args.core == "both" else "read by the compiled core"] += 1
            _parse_mutation(_damage(mutation, case_rng), version, mutation_catalog, outcomes)
        except Exception:
            traceback.print_exc()
            print(f"FAILED on fixtures {name}/{mutation_name} with case seed {case_seed} (run seed {args.seed})")
            return 1
        cases += 1
    print(f"{cases:,} damaged segments in {args.seconds:.0f} s ({cases / args.seconds:,.0f}/s), run seed {args.seed}")
    for outcome, count in outcomes.most_common():
        print(f"  {outcome:28} {count:,}")
    print("no exception other than the parser's own typed errors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
