"""Commit-log parse throughput: MB/s and mutations/s on a 32 MiB segment of mixed mutations.

The segment is built from the mutations a real Cassandra 5.0 node wrote (the ``v7`` fixture:
every CQL type, collections, range deletions, batches, system tables), repeated with fresh framing
(header, sync markers, CRCs) until it holds 32 MiB, then parsed three ways: framing and CRCs only,
plus mutation decoding, plus the row changes the source turns into events.

    python benchmarks/commitlog_parse.py [--size-mib 32] [--section-kib 64]
"""

from __future__ import annotations

import argparse
import struct
import time
import zlib
from pathlib import Path

from cdcflow.processes import tune_for_the_loop
from cdcflow.sources.cassandra_commitlog.changes import row_changes
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog
from cdcflow.sources.cassandra_commitlog.segment import Entry, read_entries

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "commitlog" / "v7"


def _crc_ints(*values: int) -> int:
    crc = 0
    for value in values:
        crc = zlib.crc32(struct.pack(">I", value & 0xFFFFFFFF), crc)
    return crc


def build_segment(mutations: list[bytes], size: int, section_size: int, segment_id: int = 1) -> bytes:
    """A version 7 segment holding ``mutations`` round-robin until ``size`` bytes, as Cassandra frames them."""
    params = b"{}"
    header = struct.pack(">iqH", 7, segment_id, len(params)) + params
    header += struct.pack(">I", zlib.crc32(params, _crc_ints(7, segment_id, segment_id >> 32, len(params))))
    out = bytearray(header)
    index = 0
    largest = max(len(m) for m in mutations) + 12
    while len(out) + 8 + section_size + largest + 8 < size:
        marker_at = len(out)
        out += bytes(8)
        while len(out) - marker_at < section_size:
            mutation = mutations[index % len(mutations)]
            index += 1
            size_bytes = struct.pack(">i", len(mutation))
            size_crc = zlib.crc32(size_bytes)
            out += (
                size_bytes + struct.pack(">I", size_crc) + mutation + struct.pack(">I", zlib.crc32(mutation, size_crc))
            )
        struct.pack_into(">iI", out, marker_at, len(out), _crc_ints(segment_id, segment_id >> 32, marker_at))
    out += bytes(size - len(out))  # the zeroed tail: a clean end
    return bytes(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=32)
    parser.add_argument("--section-kib", type=int, default=64, help="bytes between sync markers (Cassandra: one sync)")
    parser.add_argument(
        "--mix",
        choices=["user", "all"],
        default="user",
        help="user: the fixture's own tables (every type, collections, deletions, batches); all: with the"
        " system tables' mutations that creating them wrote",
    )
    args = parser.parse_args()
    [fixture] = sorted(FIXTURE.glob("CommitLog-*.log"))
    catalog = SchemaCatalog.load(FIXTURE / "schema.json")
    mutations = [e.mutation for e in read_entries(fixture.read_bytes()) if isinstance(e, Entry)]
    if args.mix == "user":
        probe = MutationDecoder(catalog, 7, lambda table: table.keyspace == "fixture")
        mutations = [m for m in mutations if probe.decode(m).updates]
    data = build_segment(mutations, args.size_mib << 20, args.section_kib << 10)
    tune_for_the_loop()  # as a worker process does
    megabytes = len(data) / 1e6
    print(
        f"segment: {megabytes:.1f} MB, built from {len(mutations)} distinct mutations ({args.mix}) of a real 5.0 node"
    )

    started = time.perf_counter()
    entries = [e for e in read_entries(data) if isinstance(e, Entry)]
    framing = time.perf_counter() - started
    print(f"framing + CRCs:        {megabytes / framing:7.1f} MB/s  {len(entries) / framing:10,.0f} mutations/s")

    decoder = MutationDecoder(catalog, 7)
    started = time.perf_counter()
    decoded = [decoder.decode(e.mutation) for e in read_entries(data) if isinstance(e, Entry)]
    decoding = time.perf_counter() - started
    print(f"+ decoding every table: {megabytes / decoding:7.1f} MB/s  {len(decoded) / decoding:10,.0f} mutations/s")

    # As the source runs: only tables with cdc = true are decoded (here the fixture's user tables);
    # a mutation of any other table is passed over after its table id.
    cdc_decoder = MutationDecoder(catalog, 7, lambda table: table.cdc)
    started = time.perf_counter()
    changes = 0
    for entry in read_entries(data):
        if isinstance(entry, Entry):
            for update in cdc_decoder.decode(entry.mutation).updates:
                changes += sum(1 for _ in row_changes(update))
    total = time.perf_counter() - started
    print(
        f"as the source (cdc tables, row changes with values): {megabytes / total:7.1f} MB/s"
        f"  {len(entries) / total:10,.0f} mutations/s  ({changes:,} changes)"
    )


if __name__ == "__main__":
    main()
