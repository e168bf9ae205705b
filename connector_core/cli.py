"""``cdcflow``: run, validate and inspect pipelines."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.config import PipelineSpec, load_pipeline
from cdcflow.contract import PluginContext
from cdcflow.errors import CdcflowError, ConfigError, PluginError
from cdcflow.extras import require_engine_extras
from cdcflow.redaction import RedactingFormatter, redact

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

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


# HTTP clients that log every request at INFO (httpx, which confluent-kafka's schema registry
# client uses): one line per registry call drowns a run's own lines, so theirs show at DEBUG only.
_PER_REQUEST_LOGGERS = ("httpx", "httpx2")


def _configure_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    line_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(RedactingFormatter(_JsonLogFormatter() if fmt == "json" else logging.Formatter(line_format)))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    root_level = logging.getLogger().level
    logging.getLogger("py4j").setLevel(max(logging.WARNING, root_level))
    for name in _PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if root_level <= logging.DEBUG else logging.WARNING)


@functools.cache
def _registry() -> PluginRegistry:
    # Once per process: main() loads it to collect plugin commands, the command uses it again.
    from cdcflow.plugins import PluginRegistry

    registry = PluginRegistry.from_entry_points()
    for failure in registry.load_failures:
        print(f"warning: {failure}", file=sys.stderr)
    return registry


def _load_all(files: Sequence[str], registry: PluginRegistry) -> list[PipelineSpec]:
    specs, errors = [], []
    for file in files:
        try:
            specs.append(load_pipeline(file, registry))
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("\n".join(errors))
    for spec in specs:
        for warning in spec.warnings:
            log.warning("%s", warning.describe(str(spec.file)))
    return specs


# --- commands ------------------------------------------------------------------------------


def _cmd_validate(args: argparse.Namespace) -> int:
    registry = _registry()
    errors = []
    for file in args.files:  # every file's problems, not only the first file's
        try:
            spec = load_pipeline(file, registry)
            require_engine_extras(spec)
            _build_every_plugin(spec, registry)
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        for warning in spec.warnings:
            print(f"warning: {redact(warning.describe(str(spec.file)))}", file=sys.stderr)
        print(f"{spec.file}: ok (pipeline {spec.name}: {spec.source.config.type} -> {spec.sink.config.type})")
    if errors:
        raise ConfigError("\n".join(errors))
    return 0


def _build_every_plugin(spec: PipelineSpec, registry: PluginRegistry) -> None:
    """Build each plugin, which checks what its model alone cannot (a schema registry client's
    settings); plugins do no I/O before ``open``."""
    context = PluginContext(pipeline=spec.name, pipeline_file=spec.file)
    for resolved in (spec.source, *spec.transforms, spec.sink, spec.checkpoint, spec.dead_letter):
        if resolved is not None:
            registry.create(resolved, context)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from cdcflow.doctor import check_pipeline, render_checks

    registry = _registry()
    specs = _load_all(args.files, registry)
    checked = [(spec, check_pipeline(spec, registry)) for spec in specs]
    if args.json:
        _print(
            [
                {
                    "pipeline": spec.name,
                    "file": str(spec.file),
                    "plugins": [{"plugin": r.where, "checks": [c.to_json() for c in r.results]} for r in reports],
                }
                for spec, reports in checked
            ]
        )
    else:
        print("\n\n".join(render_checks(spec, reports) for spec, reports in checked))
    return 1 if any(report.failed for _, reports in checked for report in reports) else 0


def _cmd_run(args: argparse.Namespace) -> int:
    from cdcflow.engine_checks import one_engine
    from cdcflow.native import core_description
    from cdcflow.worker import WorkerOptions, run_worker, run_worker_processes

    registry = _registry()
    specs = _load_all(args.files, registry)
    log.info("cdcflow core: %s", core_description())
    if args.engine:
        specs = [spec.on_engine(args.engine) for spec in specs]
    for spec in specs:
        require_engine_extras(spec)
    if one_engine(specs) == "spark":
        from cdcflow.spark_engine.runner import run_spark

        return run_spark(specs, registry)
    from cdcflow.group.worker import group_of, run_group_worker

    if group_of(specs) is not None:
        return run_group_worker(specs, registry, args.rest_port)
    workers = args.workers or max(s.worker_engine.workers for s in specs)
    metrics_port = args.metrics_port if args.metrics_port is not None else specs[0].worker_engine.metrics_port
    if args.worker_count is None and workers > 1:
        passthrough = ["--log-format", args.log_format, "--log-level", args.log_level]
        if metrics_port is not None:
            passthrough += ["--metrics-port", str(metrics_port)]
        return run_worker_processes([Path(f) for f in args.files], workers, passthrough)
    options = WorkerOptions(args.worker_index or 0, args.worker_count or 1, metrics_port)
    return run_worker(specs, registry, options)


def _cmd_plugins_list(args: argparse.Namespace) -> int:
    registry = _registry()
    rows = [(t.kind, t.type_name, t.provider, t.unavailable) for t in registry.registered()]
    width = max((len(r[1]) for r in rows), default=4)
    for kind, name, provider, unavailable in rows:
        status = f"  unavailable: {unavailable}" if unavailable is not None else ""
        print(f"{kind:<11} {name:<{width}}  {provider}{status}")
    from cdcflow.native import core_description

    print(f"{'core':<11} {core_description()}")
    return 0


def _pipeline_name(target: str) -> str:
    """A pipeline file's pipeline name, or ``target`` itself when it names no file."""
    if Path(target).is_file():
        return load_pipeline(target, _registry()).name
    return target


def _client(args: argparse.Namespace) -> Any:
    from cdcflow.group.client import ControlPlaneClient, Credentials, MissingPasswordError

    password = None
    if args.user is not None:
        password = os.environ.get("CDCFLOW_REST_PASSWORD")
        if password is None and sys.stdin.isatty():
            import getpass

            password = getpass.getpass(f"password of {args.user} at {args.url}: ")
        if password is None:
            raise MissingPasswordError(
                f"--user {args.user}: no password: set $CDCFLOW_REST_PASSWORD (or run in a terminal to be asked)"
            )
    token = args.token if args.token is not None else os.environ.get("CDCFLOW_REST_TOKEN")
    credentials = Credentials(
        user=args.user,
        password=password,
        token=token if args.user is None else None,
        cacert=args.cacert,
        client_cert=args.cert,
        client_key=args.key,
    )
    return ControlPlaneClient(args.url, credentials=credentials)


def _add_control_plane_options(parser: argparse.ArgumentParser, url_required: bool) -> None:
    """``--url`` and how to authenticate to it (``engine.group.rest.tls`` and ``.auth``)."""
    parser.add_argument(
        "--url",
        required=url_required,
        help="a worker group's REST API (http://host:8083, https://... with rest.tls): ask the running group",
    )
    parser.add_argument("--user", help="a user of rest.auth.users; the password from $CDCFLOW_REST_PASSWORD, or asked")
    parser.add_argument("--token", help="a token of rest.auth.tokens (default $CDCFLOW_REST_TOKEN, kept out of ps)")
    parser.add_argument("--cacert", type=Path, help="PEM file of the CA that signed the workers' certificate")
    parser.add_argument("--cert", type=Path, help="PEM file of this client's certificate (rest.tls.client_ca)")
    parser.add_argument("--key", type=Path, help="PEM file of this client's key (default: in --cert)")


def _print(body: Any) -> None:
    print(json.dumps(body, indent=2))


def _cmd_offsets_show(args: argparse.Namespace) -> int:
    if args.url:
        _print(_client(args).call("GET", f"/pipelines/{_pipeline_name(args.file)}/offsets"))
        return 0
    from cdcflow.group.worker import offsets_body
    from cdcflow.offsets import PipelineOffsets

    spec = load_pipeline(args.file, _registry())
    _print(offsets_body(spec.name, PipelineOffsets(spec, _registry()).show()))
    return 0


def _cmd_offsets_reset(args: argparse.Namespace) -> int:
    which = ", ".join(args.partition) if args.partition else "all partitions"
    if args.url:
        name = _pipeline_name(args.file)
        params = [("partition", p) for p in args.partition or []]
        body = _client(args).call("DELETE", f"/pipelines/{name}/offsets", params=params)
        print(f"pipeline {name}: reset {', '.join(body['partitions']) or 'nothing'}; they restart from their start")
        return 0
    from cdcflow.offsets import PipelineOffsets

    spec = load_pipeline(args.file, _registry())
    done = PipelineOffsets(spec, _registry()).reset(args.partition or None)
    print(f"pipeline {spec.name}: reset {which} ({len(done)} partitions); they restart from their start")
    return 0


def _cmd_offsets_set(args: argparse.Namespace) -> int:
    try:
        offset = json.loads(args.offset)
    except ValueError as exc:
        print(f"error: --offset is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(offset, dict):
        print("error: --offset is a JSON object, the partition's offset (see `cdcflow offsets show`)", file=sys.stderr)
        return 2
    if args.url:
        name = _pipeline_name(args.file)
        _client(args).call("PATCH", f"/pipelines/{name}/offsets", json={"partitions": {args.partition: offset}})
    else:
        from cdcflow.offsets import PipelineOffsets

        spec = load_pipeline(args.file, _registry())
        name = spec.name
        PipelineOffsets(spec, _registry()).set_offsets({args.partition: offset})
    print(f"pipeline {name}: {args.partition} set to {json.dumps(offset, sort_keys=True)}")
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from cdcflow.live_snapshots import SnapshotRequest

    request = SnapshotRequest(args.table, args.where)
    if args.url:
        name = _pipeline_name(args.pipeline)
        body = _client(args).call(
            "POST", f"/pipelines/{name}/snapshots", json={"table": args.table, "where": args.where}
        )
        print(
            f"pipeline {name}: live snapshot {body['request']} of {args.table} queued in "
            f"{len(body['partitions'])} partitions; `cdcflow status {name} --url {args.url}` shows its progress"
        )
        return 0
    from cdcflow.offsets import PipelineOffsets

    spec = load_pipeline(args.pipeline, _registry())
    queued = PipelineOffsets(spec, _registry()).request_snapshot(request)
    what = f"queued in {len(queued)} partitions" if queued else "already queued"
    print(f"pipeline {spec.name}: live snapshot {request.id} of {args.table} {what}; it runs at the next start")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    _print(_client(args).call("GET", f"/pipelines/{_pipeline_name(args.pipeline)}/status"))
    return 0


def _cmd_pause(args: argparse.Namespace) -> int:
    _print(_client(args).call("PUT", f"/pipelines/{_pipeline_name(args.pipeline)}/{args.command}"))
    return 0


def _cmd_workers(args: argparse.Namespace) -> int:
    _print(_client(args).call("GET", "/workers"))
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
                rest_port=None,
                log_format="text",
                log_level=log_level,
            )
        )


def _parser(registry: PluginRegistry) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdcflow", description="Change-data-capture pipelines")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--log-level", default="info")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run pipelines until drained or stopped (SIGTERM flushes and checkpoints)")
    run.add_argument("files", nargs="+")
    run.add_argument("--workers", type=int, help="processes splitting each pipeline's partitions")
    run.add_argument("--engine", choices=["worker", "spark"])
    run.add_argument("--metrics-port", type=int, help="Prometheus port (worker i serves port + i)")
    run.add_argument("--rest-port", type=int, help="worker groups: this worker's REST port (engine.group.rest.port)")
    run.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)
    run.add_argument("--worker-count", type=int, help=argparse.SUPPRESS)
    run.add_argument("--log-format", choices=["text", "json"], default=argparse.SUPPRESS)
    run.add_argument("--log-level", default=argparse.SUPPRESS)
    run.set_defaults(handler=_cmd_run)

    validate = commands.add_parser("validate", help="check pipeline files without running them")
    validate.add_argument("files", nargs="+")
    validate.set_defaults(handler=_cmd_validate)

    doctor = commands.add_parser(
        "doctor", help="check what pipelines need of their live systems (CDC on, topics, versions); exit 1 on a failure"
    )
    doctor.add_argument("files", nargs="+")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(handler=_cmd_doctor)

    plugins = commands.add_parser("plugins", help="installed plugins").add_subparsers(dest="action", required=True)
    plugins.add_parser("list", help="every registered plugin type and its package").set_defaults(
        handler=_cmd_plugins_list
    )

    offsets = commands.add_parser(
        "offsets", help="committed offsets; changes only while the pipeline is stopped (or its group paused)"
    ).add_subparsers(dest="action", required=True)
    show = offsets.add_parser("show", help="print a pipeline's committed checkpoints")
    show.add_argument("file", help="the pipeline file (with --url: or the pipeline's name)")
    _add_control_plane_options(show, url_required=False)
    show.set_defaults(handler=_cmd_offsets_show)
    reset = offsets.add_parser("reset", help="partitions restart from their beginning")
    reset.add_argument("file", help="the pipeline file (with --url: or the pipeline's name)")
    reset.add_argument("--partition", action="append", help="only this partition id (repeatable)")
    _add_control_plane_options(reset, url_required=False)
    reset.set_defaults(handler=_cmd_offsets_reset)
    set_offset = offsets.add_parser("set", help="a partition resumes after this offset")
    set_offset.add_argument("file", help="the pipeline file (with --url: or the pipeline's name)")
    set_offset.add_argument("--partition", required=True, help="the partition id")
    set_offset.add_argument("--offset", required=True, help="its offset, a JSON object (see offsets show)")
    _add_control_plane_options(set_offset, url_required=False)
    set_offset.set_defaults(handler=_cmd_offsets_set)

    snapshot = commands.add_parser(
        "snapshot",
        help="re-read a table's rows (op r) while the pipeline streams: a live snapshot (with --url: of a running "
        "group; else queued for the stopped pipeline's next run)",
    )
    snapshot.add_argument("pipeline", help="the pipeline file (with --url: or the pipeline's name)")
    snapshot.add_argument("table", help="keyspace.table, one the source follows")
    snapshot.add_argument("--where", help="only the rows matching this CQL condition (as written after WHERE)")
    _add_control_plane_options(snapshot, url_required=False)
    snapshot.set_defaults(handler=_cmd_snapshot)

    status = commands.add_parser("status", help="a group's pipeline: each partition's owner, offset and lag")
    status.add_argument("pipeline", help="the pipeline file or name")
    _add_control_plane_options(status, url_required=True)
    status.set_defaults(handler=_cmd_status)
    for verb, text in (("pause", "every worker of the group stops reading"), ("resume", "and reads on")):
        parser_of_verb = commands.add_parser(verb, help=f"a group's pipeline: {text}")
        parser_of_verb.add_argument("pipeline", help="the pipeline file or name")
        _add_control_plane_options(parser_of_verb, url_required=True)
        parser_of_verb.set_defaults(handler=_cmd_pause)
    workers = commands.add_parser("workers", help="a group's live workers and their buckets")
    _add_control_plane_options(workers, url_required=True)
    workers.set_defaults(handler=_cmd_workers)

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
