"""The Cassandra source's ``cdcflow`` subcommands: ``commitlog dump``, ``commitlog kept`` and ``bootstrap``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cdcflow._yaml import load_yaml_with_lines
from cdcflow.cli import CommandLine

if TYPE_CHECKING:
    from cdcflow.sources.cassandra_commitlog.error_store import ErrorStore

__all__ = ["add_commands"]


def add_commands(commands: CommandLine) -> None:
    commitlog = commands.add_command("commitlog", "Cassandra commit-log tools").add_subparsers(
        dest="action", required=True
    )
    dump = commitlog.add_parser("dump", help="print every mutation of a commit-log segment as JSON lines")
    dump.add_argument("file", help="the segment file; with --error-store, the kept segment's id or file name")
    dump.add_argument(
        "--error-store",
        metavar="PIPELINE",
        help="read the segment from the error store of this cassandra_commitlog pipeline file (a segment cut short)",
    )
    dump.add_argument("--node", help="with --error-store: the node the segment came from (default: the pipeline's)")
    dump.add_argument(
        "--schema-from",
        default=None,
        metavar="HOST[:PORT]|FILE",
        help="a node to read system_schema from, or a schema JSON file saved with --save-schema"
        " (default: 127.0.0.1:9042, or the pipeline's first host with --error-store)",
    )
    dump.add_argument("--save-schema", metavar="FILE", help="also write the schema used to FILE, for later dumps")
    dump.add_argument("--system-tables", action="store_true", help="include mutations of system keyspaces")
    dump.set_defaults(handler=_dump)

    kept = commitlog.add_parser(
        "kept", help="list the segments a cassandra_commitlog pipeline kept whole in its error store (cut short)"
    )
    kept.add_argument("pipeline", help="the cassandra_commitlog pipeline file")
    kept.set_defaults(handler=_kept)

    bootstrap = commands.add_command(
        "bootstrap", "send a table's existing rows (op r) through a cassandra_commitlog pipeline's sink"
    )
    bootstrap.add_argument("file", help="the cassandra_commitlog pipeline file")
    bootstrap.add_argument("--table", required=True, help="keyspace.table")
    bootstrap.add_argument("--ranges", type=int, default=64, help="token-ring slices (parallelism and resume unit)")
    bootstrap.add_argument("--workers", type=int, help="processes reading slices in parallel")
    bootstrap.set_defaults(handler=lambda args: _bootstrap(args, commands))


def _dump(args: argparse.Namespace) -> int:
    from cdcflow.sources.cassandra_commitlog.cdc_index import parse_cdc_index
    from cdcflow.sources.cassandra_commitlog.dump import dump_segment, dump_segment_bytes, schema_catalog_from
    from cdcflow.sources.cassandra_commitlog.segment import parse_segment_name

    if args.error_store is None:
        catalog = schema_catalog_from(args.schema_from or "127.0.0.1:9042")
        if args.save_schema:
            catalog.save(Path(args.save_schema))
        summary = dump_segment(Path(args.file), catalog, sys.stdout, system_tables=args.system_tables)
    else:
        named = parse_segment_name(Path(args.file).name)
        if named is None and not args.file.isdigit():
            print(f"error: {args.file}: a segment id or a CommitLog-<version>-<id>.log name", file=sys.stderr)
            return 2
        segment = named[1] if named is not None else int(args.file)
        with _pipeline_error_store(Path(args.error_store)) as (store, node, schema_host):
            kept = store.kept_segment(args.node or node, segment)
        catalog = schema_catalog_from(args.schema_from or schema_host)
        if args.save_schema:
            catalog.save(Path(args.save_schema))
        where = f"{args.error_store}: kept {kept.info.name}"
        index = parse_cdc_index(kept.info.index)
        summary = dump_segment_bytes(kept.data, where, index, catalog, sys.stdout, system_tables=args.system_tables)
    print(
        f"{args.file}: {summary.mutations} mutations, {summary.changes} changes, {summary.faults} faults,"
        f" {summary.skipped} system-table mutations left out",
        file=sys.stderr,
    )
    return 1 if summary.faults else 0


def _kept(args: argparse.Namespace) -> int:
    with _pipeline_error_store(Path(args.pipeline)) as (store, _, _):
        found = store.kept_segments()
    for info in found:
        print(json.dumps(info.to_json()))
    print(f"{args.pipeline}: {len(found)} segments kept in the error store", file=sys.stderr)
    return 0


@contextmanager
def _pipeline_error_store(pipeline: Path) -> Iterator[tuple[ErrorStore, str, str]]:
    """The error store a cassandra_commitlog pipeline file names, with the node name its source
    uses and the ``host:port`` it reads the schema from."""
    import socket

    from cdcflow.config import load_pipeline
    from cdcflow.contract import PluginContext
    from cdcflow.errors import ConfigError
    from cdcflow.plugins import PluginRegistry
    from cdcflow.sources.cassandra_commitlog.cluster import connect
    from cdcflow.sources.cassandra_commitlog.error_store import open_error_store
    from cdcflow.sources.cassandra_commitlog.source import CassandraCommitLogSourceConfig, default_error_file

    spec = load_pipeline(pipeline, PluginRegistry.from_entry_points())
    config = spec.source.config
    if not isinstance(config, CassandraCommitLogSourceConfig):
        raise ConfigError(f"{pipeline}: the error store of a cassandra_commitlog pipeline was asked for")
    clusters: list[Any] = []

    def session() -> Any:
        cluster, opened = connect(config.hosts, config.port, security=config)
        clusters.append(cluster)
        return opened

    try:
        store = open_error_store(config.error_store, default_error_file(PluginContext(spec.name, spec.file)), session)
        yield store, config.node or socket.gethostname(), f"{config.hosts[0]}:{config.port}"
    finally:
        for cluster in clusters:
            cluster.shutdown()


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
