"""``cdcflow``: run, validate and inspect pipelines."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from connector_core.config import PipelineSpec, load_pipeline
from connector_core.contract import CheckpointStore, PluginContext
from connector_core.errors import CdcflowError, ConfigError, PluginError

__all__ = ["main"]

log = logging.getLogger("cdcflow")


class _JsonLogFormatter(logging.Formatter):
    _STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in self._STANDARD})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _configure_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonLogFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("py4j").setLevel(max(logging.WARNING, logging.getLogger().level))


def _registry() -> Any:
    from plugins import PluginRegistry

    registry = PluginRegistry.from_entry_points()
    for failure in registry.load_failures:
        print(f"warning: {failure}", file=sys.stderr)
    return registry


def _load_all(files: Sequence[str], registry: Any) -> list[PipelineSpec]:
    specs, errors = [], []
    for file in files:
        try:
            specs.append(load_pipeline(file, registry))
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("\n".join(errors))
    return specs


# --- commands ------------------------------------------------------------------------------


def _cmd_validate(args: argparse.Namespace) -> int:
    registry = _registry()
    specs = _load_all(args.files, registry)
    for spec in specs:
        # Building every plugin checks the parts a model alone cannot (a sink's converter); no I/O.
        context = PluginContext(pipeline=spec.name, pipeline_file=spec.file)
        for resolved in (spec.source, *spec.transforms, spec.sink, spec.checkpoint, spec.dead_letter):
            if resolved is not None:
                registry.create(resolved, context)
        print(f"{spec.file}: ok (pipeline {spec.name}: {spec.source.config.type} -> {spec.sink.config.type})")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from connector_core.worker import WorkerOptions, run_spark, run_worker, run_worker_processes

    registry = _registry()
    specs = _load_all(args.files, registry)
    engines = {args.engine} if args.engine else {s.engine.type for s in specs}
    if len(engines) > 1:
        print(
            "error: these files mix engine types; run worker and spark pipelines in separate commands", file=sys.stderr
        )
        return 2
    if engines == {"spark"}:
        return run_spark(specs, registry)
    workers = args.workers or max(s.engine.workers for s in specs)
    metrics_port = args.metrics_port if args.metrics_port is not None else specs[0].engine.metrics_port
    if args.worker_count is None and workers > 1:
        passthrough = ["--log-format", args.log_format, "--log-level", args.log_level]
        if metrics_port is not None:
            passthrough += ["--metrics-port", str(metrics_port)]
        return run_worker_processes([Path(f) for f in args.files], workers, passthrough)
    options = WorkerOptions(args.worker_index or 0, args.worker_count or 1, metrics_port)
    return run_worker(specs, registry, options)


def _cmd_plugins_list(args: argparse.Namespace) -> int:
    registry = _registry()
    rows = [(t.kind, t.type_name, t.provider) for t in registry.registered()]
    width = max((len(r[1]) for r in rows), default=4)
    for kind, name, provider in rows:
        print(f"{kind:<11} {name:<{width}}  {provider}")
    return 0


def _store_for(file: str, registry: Any) -> tuple[PipelineSpec, CheckpointStore[Any]]:
    spec = load_pipeline(file, registry)
    store: CheckpointStore[Any] = registry.create(spec.checkpoint, PluginContext(spec.name, spec.file))
    store.open()
    return spec, store


def _cmd_offsets_show(args: argparse.Namespace) -> int:
    spec, store = _store_for(args.file, _registry())
    try:
        checkpoints = store.load()
    finally:
        store.close()
    now_us = time.time() * 1e6
    result = {
        "pipeline": spec.name,
        "partitions": {
            pid: {**c.to_json(), "lag_s": None if c.watermark_us is None else round((now_us - c.watermark_us) / 1e6, 3)}
            for pid, c in sorted(checkpoints.items())
        },
    }
    print(json.dumps(result, indent=2))
    return 0


def _cmd_offsets_reset(args: argparse.Namespace) -> int:
    spec, store = _store_for(args.file, _registry())
    try:
        store.reset(args.partition or None)
    finally:
        store.close()
    which = ", ".join(args.partition) if args.partition else "all partitions"
    print(f"pipeline {spec.name}: reset {which}; they restart from the source's initial offset")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from connector_core.jsonschema import pipeline_json_schema

    print(json.dumps(pipeline_json_schema(_registry()), indent=2, sort_keys=True))
    return 0


def _cmd_commitlog_dump(args: argparse.Namespace) -> int:
    from sources.cassandra_commitlog.dump import dump_segment, schema_catalog_from

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


def _cmd_bootstrap(args: argparse.Namespace) -> int:
    from connector_core._yaml import load_yaml_with_lines

    pipeline = Path(args.file).resolve()
    data, _ = load_yaml_with_lines(pipeline)  # not interpolated: ${ENV} stays a reference in the derived file
    source = dict(data.get("source") or {})
    if source.get("type") != "cassandra_commitlog":
        print(f"error: {pipeline}: bootstrap reads tables for a cassandra_commitlog pipeline", file=sys.stderr)
        return 2
    snapshot: dict[str, Any] = {"type": "cassandra_snapshot", "table": args.table, "ranges": args.ranges}
    for name in ("hosts", "port", "cluster"):
        if name in source:
            snapshot[name] = source[name]
    derived = {**data, "name": f"{data.get('name', pipeline.stem)}-bootstrap-{args.table}", "source": snapshot}
    # Next to the pipeline file, so relative paths (checkpoint, sink) resolve the same way; running
    # it again resumes from the slices its checkpoints mark as done.
    target = pipeline.with_name(f".{pipeline.stem}.bootstrap-{args.table}.yaml")
    target.write_text(yaml.safe_dump(derived, sort_keys=False))
    print(f"bootstrap of {args.table} runs as {target}", file=sys.stderr)
    run_args = argparse.Namespace(
        files=[str(target)],
        workers=args.workers,
        engine="worker",
        metrics_port=None,
        worker_index=None,
        worker_count=None,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    return _cmd_run(run_args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdcflow", description="Change-data-capture pipelines")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--log-level", default="info")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run pipelines until drained or stopped (SIGTERM flushes and checkpoints)")
    run.add_argument("files", nargs="+")
    run.add_argument("--workers", type=int, help="processes splitting each pipeline's partitions")
    run.add_argument("--engine", choices=["worker", "spark"])
    run.add_argument("--metrics-port", type=int, help="Prometheus port (worker i serves port + i)")
    run.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)
    run.add_argument("--worker-count", type=int, help=argparse.SUPPRESS)
    run.add_argument("--log-format", choices=["text", "json"], default=argparse.SUPPRESS)
    run.add_argument("--log-level", default=argparse.SUPPRESS)
    run.set_defaults(handler=_cmd_run)

    validate = commands.add_parser("validate", help="check pipeline files without running them")
    validate.add_argument("files", nargs="+")
    validate.set_defaults(handler=_cmd_validate)

    plugins = commands.add_parser("plugins", help="installed plugins").add_subparsers(dest="action", required=True)
    plugins.add_parser("list", help="every registered plugin type and its package").set_defaults(
        handler=_cmd_plugins_list
    )

    offsets = commands.add_parser("offsets", help="committed offsets").add_subparsers(dest="action", required=True)
    show = offsets.add_parser("show", help="print a pipeline's committed checkpoints")
    show.add_argument("file")
    show.set_defaults(handler=_cmd_offsets_show)
    reset = offsets.add_parser("reset", help="forget checkpoints so partitions restart from the beginning")
    reset.add_argument("file")
    reset.add_argument("--partition", action="append", help="only this partition id (repeatable)")
    reset.set_defaults(handler=_cmd_offsets_reset)

    schema = commands.add_parser("schema", help="print the JSON schema of pipeline files, for editors")
    schema.set_defaults(handler=_cmd_schema)

    commitlog = commands.add_parser("commitlog", help="Cassandra commit-log tools").add_subparsers(
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
    dump.set_defaults(handler=_cmd_commitlog_dump)

    bootstrap = commands.add_parser(
        "bootstrap", help="send a table's existing rows (op r) through a cassandra_commitlog pipeline's sink"
    )
    bootstrap.add_argument("file", help="the cassandra_commitlog pipeline file")
    bootstrap.add_argument("--table", required=True, help="keyspace.table")
    bootstrap.add_argument("--ranges", type=int, default=64, help="token-ring slices (parallelism and resume unit)")
    bootstrap.add_argument("--workers", type=int, help="processes reading slices in parallel")
    bootstrap.set_defaults(handler=_cmd_bootstrap)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args.log_format, args.log_level)
    try:
        code: int = args.handler(args)
    except (ConfigError, PluginError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CdcflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
