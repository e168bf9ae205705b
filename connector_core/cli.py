"""``cdcflow``: run, validate and inspect pipelines."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cdcflow.config import PipelineSpec, load_pipeline
from cdcflow.contract import CheckpointStore, PluginContext
from cdcflow.errors import CdcflowError, ConfigError, PluginError

__all__ = ["CommandLine", "main"]

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


@functools.cache
def _registry() -> Any:
    # Once per process: main() loads it to collect plugin commands, the command uses it again.
    from cdcflow.plugins import PluginRegistry

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
    from cdcflow.native import core_description
    from cdcflow.worker import WorkerOptions, run_worker, run_worker_processes

    registry = _registry()
    specs = _load_all(args.files, registry)
    log.info("cdcflow core: %s", core_description())
    engines = {args.engine} if args.engine else {s.engine.type for s in specs}
    if len(engines) > 1:
        print(
            "error: these files mix engine types; run worker and spark pipelines in separate commands", file=sys.stderr
        )
        return 2
    if engines == {"spark"}:
        from cdcflow.spark_engine import run_spark

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
    from cdcflow.native import core_description

    print(f"{'core':<11} {core_description()}")
    return 0


def _store_for(file: str, registry: Any) -> tuple[PipelineSpec, CheckpointStore[Any]]:
    spec = load_pipeline(file, registry)
    store: CheckpointStore[Any] = registry.create(spec.checkpoint, PluginContext(spec.name, spec.file))
    store.check_reachable(spec.engine.startup_timeout_s)
    store.open()
    return spec, store


def _cmd_offsets_show(args: argparse.Namespace) -> int:
    spec, store = _store_for(args.file, _registry())
    try:
        checkpoints = store.load()
    finally:
        store.close()
    now_us = time.time() * 1e6
    # lag_s is as of the commit (0: the partition had nothing more then); a running pipeline's
    # present lag is its cdcflow_checkpoint_lag_seconds metric. committed_s_ago says how old that is.
    result = {
        "pipeline": spec.name,
        "partitions": {
            pid: {
                **c.to_json(),
                "lag_s": round(c.lag_at_commit_s(), 3),
                "committed_s_ago": round((now_us - c.committed_at_us) / 1e6, 3),
            }
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
    from cdcflow.jsonschema import pipeline_json_schema

    print(json.dumps(pipeline_json_schema(_registry()), indent=2, sort_keys=True))
    return 0


class CommandLine:
    """What a plugin's ``cdcflow_cli_commands`` hook receives: a way to add ``cdcflow`` subcommands,
    and to run pipeline files as ``cdcflow run`` does (for commands that derive a pipeline)."""

    def __init__(self, commands: Any) -> None:
        self._commands = commands

    def add_command(self, name: str, help_text: str) -> argparse.ArgumentParser:
        """A new subcommand's parser. Give it a handler, ``handler(args) -> exit code``, with
        ``parser.set_defaults(handler=...)``; ``args`` also carries ``log_format`` and ``log_level``."""
        parser: argparse.ArgumentParser = self._commands.add_parser(name, help=help_text)
        return parser

    @staticmethod
    def run_pipeline_files(files: Sequence[str], workers: int | None = None, engine: str | None = None) -> int:
        """``cdcflow run FILES`` in this process (workers > 1 start child processes)."""
        log_level = logging.getLevelName(logging.getLogger().level).lower()
        return _cmd_run(
            argparse.Namespace(
                files=list(files),
                workers=workers,
                engine=engine,
                metrics_port=None,
                worker_index=None,
                worker_count=None,
                log_format="text",
                log_level=log_level,
            )
        )


def _parser(registry: Any) -> argparse.ArgumentParser:
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

    registry.add_cli_commands(CommandLine(commands))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        registry = _registry()  # plugins add commands, so they load before the arguments are parsed
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = _parser(registry).parse_args(argv)
    _configure_logging(args.log_format, args.log_level)
    try:
        code: int = args.handler(args)
        sys.stdout.flush()  # here, so that a reader gone away is noticed below, not at exit
    except BrokenPipeError:
        return _reader_went_away()
    except (ConfigError, PluginError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CdcflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


def _reader_went_away() -> int:
    """``cdcflow offsets show X | head``: the reader closed the pipe. End quietly, as a command
    killed by SIGPIPE does (exit 141), and keep Python from complaining about stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
