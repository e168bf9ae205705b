"""Pipeline files: one YAML file per pipeline, checked field by field before anything starts.

Loading happens in two passes. The first checks the pipeline's own shape (``name``, ``errors``,
``engine``...) and that each plugin section names an installed ``type``; the second validates each
plugin section against the config model its plugin declares. All problems of a file are gathered
and reported together, each with the file, line, dotted field path, what was expected and what
was found.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from cdcflow._config_fields import NAME_PATTERN, ResolvedLocation, ResolvedPath
from cdcflow._yaml import FieldPath, dotted, interpolate_environment, load_yaml_with_lines
from cdcflow.contract import FencingCheckpointStore, NestedPluginSection, PluginConfig
from cdcflow.engine_checks import engine_mismatches
from cdcflow.errors import (
    ConfigError,
    ConfigFieldError,
    EngineUnsupportedError,
    FieldProblem,
    UnknownPluginTypeError,
    closest_name,
)
from cdcflow.group.config import GroupConfig
from cdcflow.redaction import contains_secret, remember_secret_fields
from cdcflow.transactions import TransactionalSinkConfig, TransactionalStoreConfig, exactly_once_requested

__all__ = [
    "NAME_PATTERN",
    "ConfigWarning",
    "EngineConfig",
    "EngineSettings",
    "EngineType",
    "ErrorsConfig",
    "PipelineConfig",
    "PipelineSpec",
    "PluginLookup",
    "ResolvedLocation",
    "ResolvedPath",
    "ResolvedPlugin",
    "RetryConfig",
    "SparkEngineConfig",
    "WorkerEngineConfig",
    "engine_for",
    "load_pipeline",
    "parse_pipeline",
    "validate_plugin_config",
]


# What a value of a pattern looks like, in words, for the error that says a value does not match.
_PATTERNS_IN_WORDS = {NAME_PATTERN: "letters, digits, '.', '_' and '-', starting with a letter or digit"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryConfig(_Strict):
    """Exponential backoff with jitter for transient failures (a broker or node that is down)."""

    initial_backoff_ms: int = Field(default=200, gt=0)
    max_backoff_ms: int = Field(default=30_000, gt=0)
    multiplier: float = Field(default=2.0, ge=1.0)
    jitter: float = Field(default=0.2, ge=0.0, le=1.0, description="fraction of each delay drawn at random")
    max_elapsed_s: float | None = Field(
        default=900.0, gt=0, description="give up after this long without success; null retries forever"
    )


class ErrorsConfig(_Strict):
    tolerance: Literal["none", "all"] = Field(
        default="none",
        description="none: a record that fails a transform or is refused by the sink stops the pipeline; "
        "all: it goes to the dead-letter destination and the pipeline goes on",
    )
    dead_letter: dict[str, Any] | Literal["none"] | None = Field(
        default=None,
        description="a sink config (kafka topic, file...) that receives the records tolerance all sets aside; "
        "required with tolerance all, where none drops them (counted, kept nowhere)",
    )
    retry: RetryConfig = RetryConfig()

    @property
    def drops_accepted(self) -> bool:
        """``tolerance: all`` with ``dead_letter: none``: the file accepts that records set aside are dropped."""
        return self.tolerance == "all" and self.dead_letter == "none"


EngineType = Literal["worker", "spark"]


class EngineSettings(_Strict):
    """The settings both engines read; each engine's model adds its own (``engine.type`` chooses)."""

    type: EngineType = Field(description="the engine: worker or spark")
    batch_size: int = Field(default=2000, ge=1, description="records per sink.write call")
    max_records_per_read: int = Field(
        default=50_000,
        ge=1,
        description="records one read of one partition may take (a read cycle; a Spark micro-batch); bounds replay",
    )
    partition_refresh_ms: int = Field(default=30_000, ge=1, description="how often partitions are listed")
    startup_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="at start, how long each sink, source and checkpoint store may take to reach its system",
    )
    shutdown_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="after SIGTERM, the process ends within this: flushed and checkpointed, or exit 1 "
        "without committing what the sink did not acknowledge",
    )


class WorkerEngineConfig(EngineSettings):
    """``engine: {type: worker}``, the default: the delivery loop in this process, in worker processes
    that split the partitions, or in a worker group across machines."""

    type: Literal["worker"] = Field(default="worker", description="the worker engine")
    workers: int = Field(default=1, ge=1, description="worker processes that split the partitions")
    poll_interval_ms: int = Field(default=200, ge=1, description="idle wait when no partition has news")
    metrics_port: int | None = Field(default=None, ge=0, le=65535, description="Prometheus port; null: off")
    data_loss_warn_s: float = Field(
        default=3600.0,
        ge=0,
        description="a WARN log when a partition's data-loss headroom (cdcflow_data_loss_headroom_seconds: "
        "cdc_raw space, ScyllaDB log TTL, TiKV GC TTL) falls below this; 0: never",
    )
    group: GroupConfig | None = Field(
        default=None,
        description="run as a worker group across machines: identical `cdcflow run` processes share the "
        "pipeline's partitions",
    )


class SparkEngineConfig(EngineSettings):
    """``engine: {type: spark}``: the pipeline as a Spark Structured Streaming query, on a local
    Spark or a cluster."""

    type: Literal["spark"] = Field(description="the spark engine")
    master: str | None = Field(default=None, description="Spark master URL; default local[*]")
    trigger_interval_ms: int = Field(default=1000, ge=0, description="how often Spark plans a micro-batch")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark configuration")
    python: str | None = Field(
        default=None,
        description="the Python executors run (spark.pyspark.python), with cdcflow and the pipeline's plugins "
        "installed; default $PYSPARK_PYTHON, else the interpreter running cdcflow",
    )
    executor_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="on a cluster, how long to wait for a first executor before failing with the resources asked for",
    )


def _engine_type(section: Any) -> Any:
    """Which engine model a section is: its ``type``, worker when it names none."""
    if isinstance(section, Mapping):
        return section.get("type", "worker")
    return getattr(section, "type", "worker")


EngineConfig = Annotated[
    Annotated[WorkerEngineConfig, Tag("worker")] | Annotated[SparkEngineConfig, Tag("spark")],
    Discriminator(_engine_type),
]
"""``engine``: the worker engine's settings or the spark engine's, as ``engine.type`` says; a
setting of the other engine is refused, naming the engine it belongs to."""

_ENGINE_CONFIG: TypeAdapter[EngineConfig] = TypeAdapter(EngineConfig)


def engine_for(engine: EngineConfig, engine_type: EngineType) -> EngineConfig:
    """``engine`` as ``engine_type``'s settings (``cdcflow run --engine`` overriding a file's type):
    the settings both engines read carry over, the other engine's take their defaults."""
    if engine.type == engine_type:
        return engine
    shared = {name: getattr(engine, name) for name in EngineSettings.model_fields}
    return _ENGINE_CONFIG.validate_python({**shared, "type": engine_type})


class PipelineConfig(_Strict):
    """The pipeline's own shape; plugin sections are checked against their plugin's model later."""

    name: str = Field(pattern=NAME_PATTERN, max_length=200, examples=["orders-to-kafka"])
    source: dict[str, Any]
    transforms: list[dict[str, Any]] = Field(default_factory=list)
    sink: dict[str, Any]
    checkpoint: dict[str, Any] | None = None
    errors: ErrorsConfig = ErrorsConfig()
    engine: EngineConfig = WorkerEngineConfig()


class PluginLookup(Protocol):
    """The part of the plugin registry config loading needs."""

    def lookup(self, kind: str, type_name: str) -> type[Any]: ...


@dataclass(frozen=True)
class ResolvedPlugin:
    kind: str
    cls: type[Any]
    config: PluginConfig
    field_path: str


@dataclass(frozen=True)
class ConfigWarning:
    """Something a pipeline file asks for that runs, but that its author should know the cost of."""

    path: str
    message: str
    line: int | None = None

    def describe(self, file: str) -> str:
        where = f"{file}: line {self.line}" if self.line is not None else file
        return f"{where}: field {self.path}: {self.message}"


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline file, fully validated: everything needed to build and run it."""

    file: Path
    name: str
    source: ResolvedPlugin
    transforms: tuple[ResolvedPlugin, ...]
    sink: ResolvedPlugin
    checkpoint: ResolvedPlugin
    dead_letter: ResolvedPlugin | None
    errors: ErrorsConfig
    engine: EngineConfig
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)
    group: GroupConfig | None = None
    warnings: tuple[ConfigWarning, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.file.parent

    @property
    def worker_engine(self) -> WorkerEngineConfig:
        """The worker engine's settings; EngineUnsupportedError for a pipeline of another engine."""
        if not isinstance(self.engine, WorkerEngineConfig):
            raise EngineUnsupportedError(self._not_on("worker"))
        return self.engine

    @property
    def spark_engine(self) -> SparkEngineConfig:
        """The spark engine's settings; EngineUnsupportedError for a pipeline of another engine."""
        if not isinstance(self.engine, SparkEngineConfig):
            raise EngineUnsupportedError(self._not_on("spark"))
        return self.engine

    def on_engine(self, engine_type: EngineType) -> PipelineSpec:
        """This pipeline on ``engine_type`` whatever its file says (``cdcflow run --engine``): see
        :func:`engine_for`."""
        return replace(self, engine=engine_for(self.engine, engine_type))

    def _not_on(self, engine_type: str) -> str:
        return (
            f"{self.file}: pipeline {self.name} is set for the {self.engine.type} engine (engine.type), "
            f"not the {engine_type} engine"
        )


def load_pipeline(file: Path | str, registry: PluginLookup, environ: Mapping[str, str] | None = None) -> PipelineSpec:
    """Read, interpolate and validate a pipeline file. Raises a ConfigError subclass naming every
    problem of the file."""
    path = Path(file).resolve()
    data, lines = load_yaml_with_lines(path)
    unresolved: dict[FieldPath, ConfigFieldError] = {}
    data = interpolate_environment(data, path, lines, environ, problems=unresolved)
    remember_secret_fields(data)  # before any check can quote a value
    if not unresolved:
        return parse_pipeline(data, path, registry, lines)
    # The rest of the file is checked too. A field whose reference is unresolved keeps its text,
    # so what its own check says of that text is left out (not that the field is unknown, say).
    references = [p for error in unresolved.values() for p in error.problems]
    texts = {dotted(where): _describe(_value_at(data, where)) for where in unresolved}
    try:
        parse_pipeline(data, path, registry, lines)
        others: list[FieldProblem] = []
    except ConfigFieldError as exc:
        others = [p for p in exc.problems if texts.get(p.path) != p.found]
    if not others and len(unresolved) == 1:
        raise next(iter(unresolved.values()))
    raise ConfigFieldError(path, _in_file_order([*references, *others]))


def parse_pipeline(
    data: Any, file: Path, registry: PluginLookup, lines: Mapping[FieldPath, int] | None = None
) -> PipelineSpec:
    """Validate a pipeline's data. Every section that can be checked is, even when another is
    wrong, so that one ``cdcflow validate`` shows everything to fix."""
    lines = lines or {}
    if not isinstance(data, dict):
        raise ConfigFieldError(file, [FieldProblem("", "a mapping of pipeline fields", _describe(data), 1)])
    given_name = data.get("name")
    name = given_name if isinstance(given_name, str) else "pipeline"
    # Relative paths resolve against the file's folder; a worker group is named after the pipeline.
    context = {"base_dir": file.parent, "pipeline": name}
    problems: list[FieldProblem] = []
    try:
        pipeline: PipelineConfig | None = PipelineConfig.model_validate(data, context=context)
    except ValidationError as exc:
        pipeline = None
        problems += _problems(exc, (), PipelineConfig, lines)

    def resolve(kind: str, section: Any, path: FieldPath) -> ResolvedPlugin | None:
        if not isinstance(section, Mapping):
            return None  # absent, or not a section: the pipeline's own model says which
        resolved, found = resolve_plugin_config(kind, section, path, registry, context, lines)
        problems.extend(found)
        return resolved

    source = resolve("source", data.get("source"), ("source",))
    listed = data.get("transforms")
    transforms = (
        [resolve("transform", t, ("transforms", i)) for i, t in enumerate(listed)] if isinstance(listed, list) else []
    )
    sink = resolve("sink", data.get("sink"), ("sink",))
    checkpoint_section = data.get("checkpoint")
    if checkpoint_section is None:
        checkpoint_section = {"type": "file", "path": f"state/{name}"}
    checkpoint = resolve("checkpoint", checkpoint_section, ("checkpoint",))
    given_errors = data.get("errors")
    errors_section: Mapping[str, Any] = given_errors if isinstance(given_errors, Mapping) else {}
    dead_letter = resolve("sink", errors_section.get("dead_letter"), ("errors", "dead_letter"))
    found, warnings = _dead_letter_checks(errors_section, lines)
    problems += found

    engine = pipeline.engine if pipeline is not None else _engine_or_none(data.get("engine", {}), context)
    group = None
    if engine is not None:
        problems += _engine_problems(engine, sink, dead_letter, checkpoint, lines)
        problems += _delivery_problems(engine, sink, dead_letter, checkpoint, lines)
        if engine.type == "worker" and engine.group is not None:
            group = engine.group
            problems += _group_problems(engine, checkpoint, lines)
    if problems or pipeline is None:
        raise ConfigFieldError(file, _in_file_order(problems))
    assert source is not None and sink is not None and checkpoint is not None
    return PipelineSpec(
        file=file,
        name=pipeline.name,
        source=source,
        transforms=tuple(t for t in transforms if t is not None),
        sink=sink,
        checkpoint=checkpoint,
        dead_letter=dead_letter,
        errors=pipeline.errors,
        engine=pipeline.engine,
        raw=data,
        group=group,
        warnings=tuple(warnings),
    )


def _engine_or_none(section: Any, context: Mapping[str, Any]) -> EngineConfig | None:
    """``section`` as an engine's settings, or None when it is not (its problems are reported already)."""
    try:
        return _ENGINE_CONFIG.validate_python(section, context=dict(context))
    except ValidationError:
        return None


def _dead_letter_checks(
    errors: Mapping[str, Any], lines: Mapping[FieldPath, int]
) -> tuple[list[FieldProblem], list[ConfigWarning]]:
    """``tolerance: all`` sets records aside: it needs a dead-letter sink, or ``none`` said outright."""
    if errors.get("tolerance") != "all":
        return [], []
    where: FieldPath = ("errors", "dead_letter")
    dead_letter = errors.get("dead_letter")
    if dead_letter is None:
        expected = (
            "a sink for the records tolerance: all sets aside (such as {type: file, path: dead-letters.jsonl}), "
            "or none to drop them"
        )
        line = lines.get(where, lines.get(("errors", "tolerance")))
        return [FieldProblem(dotted(where), expected, "nothing", line)], []
    if dead_letter == "none":
        message = (
            "none: records that tolerance: all sets aside (unreadable at the source, failing a transform, "
            "refused by the sink) are dropped and kept nowhere; they are only counted"
        )
        return [], [ConfigWarning(dotted(where), message, lines.get(where))]
    return [], []


def _engine_problems(
    engine: EngineConfig,
    sink: ResolvedPlugin | None,
    dead_letter: ResolvedPlugin | None,
    checkpoint: ResolvedPlugin | None,
    lines: Mapping[FieldPath, int],
) -> list[FieldProblem]:
    """What the engine needs of the sinks and the checkpoint store (:mod:`cdcflow.engine_checks`)."""
    return [
        FieldProblem(dotted(m.path), m.expected, m.found, lines.get(m.path))
        for m in engine_mismatches(engine.type, sink, dead_letter, checkpoint)
    ]


def _delivery_problems(
    engine: EngineConfig,
    sink: ResolvedPlugin | None,
    dead_letter: ResolvedPlugin | None,
    checkpoint: ResolvedPlugin | None,
    lines: Mapping[FieldPath, int],
) -> list[FieldProblem]:
    """``sink.delivery: exactly_once`` commits records and checkpoints in one transaction of one
    system (:mod:`cdcflow.transactions`): the store and a dead-letter sink of that kind must be
    on the same cluster (that the engine must be the worker is an engine check: :mod:`cdcflow.engine_checks`)."""
    if sink is None or not exactly_once_requested(sink.config):
        return []
    assert isinstance(sink.config, TransactionalSinkConfig)
    domain = sink.config.transaction_domain()
    where: FieldPath = ("sink", "delivery")
    problems = []
    if checkpoint is not None:
        store_config = checkpoint.config
        if not isinstance(store_config, TransactionalStoreConfig) or store_config.transaction_domain().system != (
            domain.system
        ):
            if engine.type != "spark":  # there the file store is required and the delivery refused
                problems.append(
                    FieldProblem(
                        "checkpoint.type",
                        f"a checkpoint store that commits in the sink's transactions ({domain.system}) with "
                        "sink.delivery exactly_once",
                        repr(store_config.type),
                        lines.get(("checkpoint", "type"), lines.get(("checkpoint",), lines.get(where))),
                    )
                )
        elif not store_config.transaction_domain().shared_with(domain):
            problems.append(
                FieldProblem(
                    "checkpoint.bootstrap_servers",
                    f"the sink's cluster with sink.delivery exactly_once (records and checkpoints are one "
                    f"transaction): a broker of {domain.describe()}",
                    ", ".join(sorted(store_config.transaction_domain().addresses)),
                    lines.get(("checkpoint", "bootstrap_servers"), lines.get(("checkpoint",))),
                )
            )
    if dead_letter is not None and isinstance(dead_letter.config, TransactionalSinkConfig):
        dead_domain = dead_letter.config.transaction_domain()
        if dead_domain.system == domain.system and not dead_domain.shared_with(domain):
            problems.append(
                FieldProblem(
                    "errors.dead_letter.bootstrap_servers",
                    f"the sink's cluster with sink.delivery exactly_once (dead letters join the records' "
                    f"transaction): a broker of {domain.describe()}",
                    ", ".join(sorted(dead_domain.addresses)),
                    lines.get(("errors", "dead_letter", "bootstrap_servers"), lines.get(("errors", "dead_letter"))),
                )
            )
    return problems


def _group_problems(
    engine: WorkerEngineConfig, checkpoint: ResolvedPlugin | None, lines: Mapping[FieldPath, int]
) -> list[FieldProblem]:
    """What a worker group (``engine.group``) needs of the rest of the file."""
    problems = []
    if engine.workers != 1:
        problems.append(
            FieldProblem(
                "engine.workers",
                "1 with engine.group (a group grows by starting `cdcflow run` on more machines)",
                str(engine.workers),
                lines.get(("engine", "workers")),
            )
        )
    if checkpoint is not None and not issubclass(checkpoint.cls, FencingCheckpointStore):
        problems.append(
            FieldProblem(
                "checkpoint.type",
                "a checkpoint store the group's machines share and that fences a worker which lost its "
                "partitions (kafka) with engine.group",
                f"{checkpoint.config.type!r}, which is not shared between machines",
                lines.get(("checkpoint", "type"), lines.get(("checkpoint",))),
            )
        )
    return problems


def resolve_plugin_config(
    kind: str,
    section: Mapping[str, Any],
    path: FieldPath,
    registry: PluginLookup,
    context: Mapping[str, Any],
    lines: Mapping[FieldPath, int],
) -> tuple[ResolvedPlugin | None, list[FieldProblem]]:
    """Find the plugin a section names and validate the section against its config model, and
    the plugin sections inside it (a sink's converter) against theirs."""
    type_name = section.get("type")
    if not isinstance(type_name, str):
        found = "nothing" if type_name is None else _describe(type_name)
        line = lines.get((*path, "type"), lines.get(path))
        return None, [FieldProblem(dotted((*path, "type")), f"the name of a {kind} plugin type", found, line)]
    try:
        cls = registry.lookup(kind, type_name)
    except UnknownPluginTypeError as exc:
        expected = f"one of the installed {kind} types ({', '.join(sorted(exc.known)) or 'none'})"
        suggestion = repr(exc.suggestion) if exc.suggestion is not None else None
        where = (*path, "type")
        return None, [FieldProblem(dotted(where), expected, repr(type_name), _nearest_line(where, lines), suggestion)]
    model: type[PluginConfig] = cls.config_model
    problems: list[FieldProblem] = []
    config = None
    try:
        config = model.model_validate(dict(section), context=dict(context))
    except ValidationError as exc:
        problems += _problems(exc, path, model, lines)
    for nested in model.nested_plugin_sections(section):
        problems += _nested_problems(nested, path, registry, context, lines)
    if problems or config is None:
        return None, problems
    return ResolvedPlugin(kind, cls, config, dotted(path)), []


def _nested_problems(
    nested: NestedPluginSection,
    outer: FieldPath,
    registry: PluginLookup,
    context: Mapping[str, Any],
    lines: Mapping[FieldPath, int],
) -> list[FieldProblem]:
    """A nested plugin section's problems, each named where the file holds the field."""
    inner: FieldPath = (*outer, nested.field_name)
    _, found = resolve_plugin_config(nested.kind, nested.section, inner, registry, context, lines)
    written_at = {dotted((*inner, name)): (*outer, *at) for name, at in nested.written_at.items()}
    return [_named_where_written(problem, written_at, lines) for problem in found]


def _named_where_written(
    problem: FieldProblem, written_at: Mapping[str, FieldPath], lines: Mapping[FieldPath, int]
) -> FieldProblem:
    for was, place in written_at.items():
        if _within(problem.path, was):
            return replace(problem, path=dotted(place) + problem.path[len(was) :], line=_nearest_line(place, lines))
    return problem


def validate_plugin_config(
    kind: str,
    section: Mapping[str, Any],
    registry: PluginLookup,
    file: Path | str,
    field_path: str,
    base_dir: Path,
) -> ResolvedPlugin:
    """Validate one plugin section outside a pipeline file's first pass (a sink's nested converter).

    Its problems name the file's lines too: the file is read again for them (it is small, and
    this happens once per plugin instance built).
    """
    path = _undotted(field_path)
    resolved, problems = resolve_plugin_config(kind, section, path, registry, {"base_dir": base_dir}, {})
    if problems or resolved is None:
        lines = _lines_of(Path(file))
        raise ConfigFieldError(
            file, [replace(p, line=p.line or _nearest_line(_undotted(p.path), lines)) for p in problems]
        )
    return resolved


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _undotted(field_path: str) -> FieldPath:
    """``transforms[0].regex`` -> ``("transforms", 0, "regex")`` (the inverse of ``dotted``)."""
    return tuple(name if name else int(index) for name, index in _PATH_PART.findall(field_path))


def _value_at(data: Any, path: FieldPath) -> Any:
    for part in path:
        data = data[part]
    return data


def _lines_of(file: Path) -> Mapping[FieldPath, int]:
    try:
        return load_yaml_with_lines(file)[1]
    except ConfigError:
        return {}  # not a file (built in code): the problems go without lines


def _within(path: str, outer: str) -> bool:
    """Whether dotted ``path`` is ``outer`` or a field inside it."""
    return path == outer or path.startswith((f"{outer}.", f"{outer}["))


def _in_file_order(problems: Iterable[FieldProblem]) -> list[FieldProblem]:
    """Each problem once (a shortcut field is checked by its plugin and its converter), by line."""
    return sorted(dict.fromkeys(problems), key=lambda p: (p.line is None, p.line or 0))


def _problems(
    exc: ValidationError, prefix: FieldPath, model: type[BaseModel], lines: Mapping[FieldPath, int]
) -> list[FieldProblem]:
    """pydantic's errors as problems in plain words: one per field, whatever choice of types the
    field allows; a check's own explanation as it is; "did you mean" for a name close to a known one."""
    problems = []
    choices: dict[FieldPath, list[tuple[ErrorDetails, _Place]]] = {}
    for error in exc.errors(include_url=False):
        place = _place(model, error["loc"])
        if place.union_at is not None:
            choices.setdefault(place.path[: place.union_at], []).append((error, place))
        else:
            problems.append(_problem(error, place, prefix, lines))
    for location, tried in choices.items():
        deeper = [(error, place) for error, place in tried if len(place.path) > len(location)]
        if deeper:  # the value is of one of the kinds allowed, and wrong inside
            problems += [_problem(error, place, prefix, lines) for error, place in deeper]
        else:
            problems.append(_no_choice_fits([error for error, _ in tried], tried[0][1], prefix, location, lines))
    return problems


def _problem(error: ErrorDetails, place: _Place, prefix: FieldPath, lines: Mapping[FieldPath, int]) -> FieldProblem:
    location: FieldPath = (*prefix, *place.path)
    line = _nearest_line(location, lines)
    kind = error["type"]
    if kind == "missing":
        return FieldProblem(dotted(location), "a value (the field is required)", "nothing", line)
    if kind == "extra_forbidden":
        name = place.path[-1] if place.path else None
        other = _choice_with_field(place, name)
        if other is not None:  # engine: {type: worker, master: ...}: the other kind's setting
            chooser = dotted((*prefix, *place.path[:-1], other.field))
            reason = f"{name} is a setting of {chooser} {other.tag}, not of {chooser} {place.choice}"
            return FieldProblem.because(dotted(location), reason, _describe(error["input"]), line)
        known = sorted(place.container.model_fields) if place.container is not None else []
        expected = f"one of the known fields ({', '.join(known)})" if known else "no such field"
        return FieldProblem(dotted(location), expected, "an unrecognized field", line, closest_name(name, known))
    if kind == "union_tag_invalid":
        unknown = _unknown_choice(error, place, location, lines)
        if unknown is not None:
            return unknown
    if kind in ("value_error", "assertion_error"):
        # The check explains itself; a whole section the file shows anyway is not repeated.
        found = "" if isinstance(error["input"], Mapping) else _describe(error["input"])
        return FieldProblem.because(dotted(location), _expected_from(error), found, line)
    found = _describe(error["input"])
    if kind == "string_pattern_mismatch":
        expected, allowed = _pattern_in_words(str((error.get("ctx") or {}).get("pattern", "")), place.field)
        return FieldProblem(dotted(location), expected, found, line, _suggested(error["input"], allowed))
    return FieldProblem(
        dotted(location), _expected_from(error), found, line, _suggested(error["input"], _quoted(error))
    )


def _no_choice_fits(
    tried: Sequence[ErrorDetails], place: _Place, prefix: FieldPath, location: FieldPath, lines: Mapping[FieldPath, int]
) -> FieldProblem:
    """One problem for a value that is none of the kinds its field allows (``converter: 5``)."""
    kinds = list(dict.fromkeys(_expected_from(error) for error in tried))
    expected = ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]
    named_field = place.container is not None and location and place.container.model_fields.get(str(location[-1]))
    if named_field and named_field.description:  # the field's own words for what it takes
        expected += f" ({named_field.description})"
    allowed = [name for error in tried for name in _quoted(error)]
    full: FieldPath = (*prefix, *location)
    return FieldProblem(
        dotted(full),
        expected,
        _describe(tried[0]["input"]),
        _nearest_line(full, lines),
        _suggested(tried[0]["input"], allowed),
    )


def _suggested(found: Any, allowed: Sequence[str]) -> str | None:
    match = closest_name(found, allowed)
    return repr(match) if match is not None else None


_QUOTED = re.compile(r"'([^']*)'")
_ALTERNATIVES = re.compile(r"^\^\(([\w.|-]+)\)\$$")


def _quoted(error: ErrorDetails) -> list[str]:
    """The values a literal or enum field allows, from its error."""
    if error["type"] not in ("literal_error", "enum"):
        return []
    return _QUOTED.findall(str((error.get("ctx") or {}).get("expected", "")))


def _pattern_in_words(pattern: str, field_info: FieldInfo | None) -> tuple[str, list[str]]:
    """What a value matching ``pattern`` looks like, and the values it allows when it lists them."""
    alternatives = _ALTERNATIVES.match(pattern)
    if alternatives is not None:
        allowed = alternatives.group(1).split("|")
        return f"one of {', '.join(allowed)}", allowed
    words = _PATTERNS_IN_WORDS.get(pattern)
    if words is None:
        words = f"text matching the regular expression {pattern}"
        if field_info is not None and field_info.description:
            words = f"{field_info.description} ({words})"
    if field_info is not None and field_info.examples:
        words += f" (like {field_info.examples[0]!r})"
    return words, []


# pydantic's message openings, and what an expectation (or a check's own reason) starts with instead.
_LEADS = (
    ("Input should be ", ""),
    ("Value error, ", ""),
    ("Assertion failed, ", ""),
    ("String should have ", "text with "),
    ("List should have ", "a list with "),
    ("Dictionary should have ", "a mapping with "),
    ("Input ", ""),
)
_COUNT_TAIL = re.compile(r"( after validation)?, not \d+$")
_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of")


def _expected_from(error: ErrorDetails) -> str:
    message = str(error["msg"])
    for lead, instead in _LEADS:
        if message.startswith(lead):
            message = instead + message[len(lead) :]
            break
    if error["type"] in ("too_short", "too_long", "string_too_short", "string_too_long"):
        message = _COUNT_TAIL.sub("", message)  # "... after validation, not 0": the value found says it
    return f"a number {message}" if error["type"] in _BOUNDS else message


def _nearest_line(location: FieldPath, lines: Mapping[FieldPath, int]) -> int | None:
    for end in range(len(location), -1, -1):
        if location[:end] in lines:
            return lines[location[:end]]
    return None


@dataclass(frozen=True)
class _Place:
    """Where an error's location leads in a model.

    ``path`` is the location without pydantic's union-member tags (``converter.str``);
    ``union_at`` how much of ``path`` comes before the first such tag; ``field`` the last model
    field on the way; ``container`` the model whose field the last part names (or would name).
    """

    path: FieldPath
    union_at: int | None
    field: FieldInfo | None
    container: type[BaseModel] | None
    choice: str | None  # the tag of the last tagged union's member passed through (``worker``)
    choices: Mapping[str, type[BaseModel]]  # that union's members by tag


@dataclass(frozen=True)
class _OtherChoice:
    """The member of a tagged union that has a field the chosen member lacks, and how it is chosen."""

    tag: str
    field: str  # the field whose value chooses (``type``)


def _place(model: type[BaseModel], loc: Sequence[str | int]) -> _Place:
    current: Any = model
    path: list[str | int] = []
    union_at: int | None = None
    field_info: FieldInfo | None = None
    container: type[BaseModel] | None = None
    choice: str | None = None
    choices: Mapping[str, type[BaseModel]] = {}
    for part in loc:
        current = _without_none(current)
        if _is_union(current):
            union_at = len(path) if union_at is None else union_at
            tagged = _tagged_members(current)
            if tagged and isinstance(part, str) and part in tagged:
                choice, choices = part, tagged
                current = tagged[part]
            else:
                current = next((m for m in get_args(current) if _tag_names(part, m)), Any)
            continue
        path.append(part)
        container = None
        if isinstance(current, type) and issubclass(current, BaseModel):
            container = current
            field_info = current.model_fields.get(part) if isinstance(part, str) else None
            current = field_info.annotation if field_info is not None else Any
        elif get_origin(current) in (dict, Mapping) and len(get_args(current)) == 2:
            current = get_args(current)[1]
        elif get_origin(current) in (list, tuple, Sequence) and get_args(current):
            current = get_args(current)[0]
        else:
            current = Any
    return _Place(tuple(path), union_at, field_info, container, choice, choices)


def _tagged_members(union: Any) -> dict[str, type[BaseModel]]:
    """A tagged union's models by tag (``Annotated[WorkerEngineConfig, Tag("worker")]``); empty for
    another union."""
    members: dict[str, type[BaseModel]] = {}
    for member in get_args(union):
        if get_origin(member) is not Annotated:
            return {}
        model, *metadata = get_args(member)
        tag = next((m.tag for m in metadata if isinstance(m, Tag)), None)
        if tag is None or not (isinstance(model, type) and issubclass(model, BaseModel)):
            return {}
        members[tag] = model
    return members


def _choosing_field(members: Mapping[str, type[BaseModel]]) -> str | None:
    """The field whose value is each member's tag (``type: Literal["worker"]``), if one is."""
    for name in next(iter(members.values())).model_fields if members else ():
        if all(
            name in model.model_fields and get_args(model.model_fields[name].annotation) == (tag,)
            for tag, model in members.items()
        ):
            return name
    return None


def _choice_with_field(place: _Place, name: str | int | None) -> _OtherChoice | None:
    """The other member of the tagged union ``place`` went through that has field ``name``."""
    chooser = _choosing_field(place.choices)
    if chooser is None or not isinstance(name, str):
        return None
    for tag, model in place.choices.items():
        if tag != place.choice and name in model.model_fields:
            return _OtherChoice(tag, chooser)
    return None


def _unknown_choice(
    error: ErrorDetails, place: _Place, location: FieldPath, lines: Mapping[FieldPath, int]
) -> FieldProblem | None:
    """A tagged union's choosing field naming no member (``engine: {type: sprak}``), said of that field."""
    members = _tagged_members(_without_none(place.field.annotation)) if place.field is not None else {}
    chooser = _choosing_field(members)
    given = error["input"]
    if chooser is None or not isinstance(given, Mapping):
        return None
    tags = [repr(tag) for tag in members]
    expected = ", ".join(tags[:-1]) + f" or {tags[-1]}" if len(tags) > 1 else tags[0]
    where: FieldPath = (*location, chooser)
    found = given.get(chooser)
    return FieldProblem(
        dotted(where), expected, _describe(found), _nearest_line(where, lines), _suggested(found, list(members))
    )


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def _without_none(annotation: Any) -> Any:
    """``X | None`` is ``X`` to pydantic's locations (a nullable value, not a choice of types)."""
    if not _is_union(annotation):
        return annotation
    members = [m for m in get_args(annotation) if m is not type(None)]
    if len(members) == 1:
        return members[0]
    return Union[tuple(members)]  # noqa: UP007 - built from a runtime tuple


def _tag_names(tag: str | int, member: Any) -> bool:
    """Whether pydantic's union-member tag (``str``, ``dict[str,any]``, a model's name) is ``member``."""
    if not isinstance(tag, str):
        return False
    if isinstance(member, type):
        return tag == member.__name__
    origin = get_origin(member)
    return isinstance(origin, type) and tag.startswith(f"{origin.__name__}[")


def _describe(value: Any) -> str:
    if contains_secret(value):
        return "a secret (not shown)" if isinstance(value, str) else f"a {type(value).__name__} holding a secret"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}" if not isinstance(value, str) else text
