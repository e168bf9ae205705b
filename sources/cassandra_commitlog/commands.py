"""The Cassandra source's ``cdcflow`` subcommands: ``commitlog dump`` and ``bootstrap``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from cdcflow._yaml import load_yaml_with_lines
from cdcflow.cli import CommandLine

__all__ = ["add_commands"]


def add_commands(commands: CommandLine) -> None:
    commitlog = commands.add_command("commitlog", "Cassandra commit-log tools").add_subparsers(
        dest="action", required=True
    )
    dump = commitlog.add_parser("dump", help="print every mutation of a commit-log segment as JSON lines")
    dump.add_argument("file")
    dump.add_argument(
        "--schema-from",
        default="127.0.0.1:9042",
        metavar="HOST[:PORT]|FILE",
        help="a node to read system_schema from, or a schema JSON file saved with --save-schema",
    )
    dump.add_argument("--save-schema", metavar="FILE", help="also write the schema used to FILE, for later dumps")
    dump.add_argument("--system-tables", action="store_true", help="include mutations of system keyspaces")
    dump.set_defaults(handler=_dump)

    bootstrap = commands.add_command(
        "bootstrap", "send a table's existing rows (op r) through a cassandra_commitlog pipeline's sink"
    )
    bootstrap.add_argument("file", help="the cassandra_commitlog pipeline file")
    bootstrap.add_argument("--table", required=True, help="keyspace.table")
    bootstrap.add_argument("--ranges", type=int, default=64, help="token-ring slices (parallelism and resume unit)")
    bootstrap.add_argument("--workers", type=int, help="processes reading slices in parallel")
    bootstrap.set_defaults(handler=lambda args: _bootstrap(args, commands))


def _dump(args: argparse.Namespace) -> int:
    from cdcflow.sources.cassandra_commitlog.dump import dump_segment, schema_catalog_from

    catalog = schema_catalog_from(args.schema_from)
    if args.save_schema:
        catalog.save(Path(args.save_schema))
    summary = dump_segment(Path(args.file), catalog, sys.stdout, system_tables=args.system_tables)
    print(
        f"{args.file}: {summary.mutations} mutations, {summary.changes} changes, {summary.faults} faults,"
        f" {summary.skipped} system-table mutations left out",
        file=sys.stderr,
    )
    return 1 if summary.faults else 0


def _bootstrap(args: argparse.Namespace, commands: CommandLine) -> int:
    pipeline = Path(args.file).resolve()
    data, _ = load_yaml_with_lines(pipeline)  # not interpolated: ${ENV} stays a reference in the derived file
    source = dict(data.get("source") or {})
    if source.get("type") != "cassandra_commitlog":
        print(f"error: {pipeline}: bootstrap reads tables for a cassandra_commitlog pipeline", file=sys.stderr)
        return 2
    snapshot: dict[str, Any] = {"type": "cassandra_snapshot", "table": args.table, "ranges": args.ranges}
    for name in ("hosts", "port", "cluster", "username", "password", "ssl"):
        if name in source:
            snapshot[name] = source[name]
    derived = {**data, "name": f"{data.get('name', pipeline.stem)}-bootstrap-{args.table}", "source": snapshot}
    # Next to the pipeline file, so relative paths (checkpoint, sink) resolve the same way; running
    # it again resumes from the slices its checkpoints mark as done.
    target = pipeline.with_name(f".{pipeline.stem}.bootstrap-{args.table}.yaml")
    target.write_text(yaml.safe_dump(derived, sort_keys=False))
    print(f"bootstrap of {args.table} runs as {target}", file=sys.stderr)
    return commands.run_pipeline_files([str(target)], workers=args.workers, engine="worker")
