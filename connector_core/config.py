"""Pipeline files: one YAML file per pipeline, checked field by field before anything starts.

Loading happens in two passes. The first checks the pipeline's own shape (``name``, ``errors``,
``engine``...) and that each plugin section names an installed ``type``; the second validates each
plugin section against the config model its plugin declares. All problems of a file are gathered
and reported together, each with the file, line, dotted field path, what was expected and what
was found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo

from cdcflow._yaml import FieldPath, dotted, interpolate_environment, load_yaml_with_lines
from cdcflow.contract import PluginConfig
from cdcflow.errors import ConfigError, ConfigFieldError, FieldProblem, UnknownPluginTypeError

__all__ = [
    "EngineConfig",
    "ErrorsConfig",
    "PipelineConfig",
    "PipelineSpec",
    "PluginLookup",
    "ResolvedLocation",
    "ResolvedPath",
    "ResolvedPlugin",
    "RetryConfig",
    "load_pipeline",
    "parse_pipeline",
    "validate_plugin_config",
]


def _resolve_against_pipeline_folder(value: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    path = value.expanduser()
    return path if path.is_absolute() or base is None else (Path(base) / path).resolve()


ResolvedPath = Annotated[Path, AfterValidator(_resolve_against_pipeline_folder)]
"""A filesystem path in a config; a relative one resolves against the pipeline file's folder."""

_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _resolve_location(value: str, info: ValidationInfo) -> str:
    if _URI_SCHEME.match(value):
        return value  # hdfs://, s3a://, file://...: Spark's Hadoop filesystems take it as it is
    return str(_resolve_against_pipeline_folder(Path(value), info))


ResolvedLocation = Annotated[str, AfterValidator(_resolve_location)]
"""A path or a Hadoop filesystem URI; a relative path resolves against the pipeline file's folder."""


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
    dead_letter: dict[str, Any] | None = Field(
        default=None, description="a sink config (kafka topic, file...) that receives rejected records"
    )
    retry: RetryConfig = RetryConfig()


class EngineConfig(_Strict):
    type: Literal["worker", "spark"] = "worker"
    workers: int = Field(default=1, ge=1, description="worker processes that split the partitions")
    batch_size: int = Field(default=2000, ge=1, description="records per sink.write call")
    max_records_per_read: int = Field(
        default=50_000,
        ge=1,
        description="records one read of one partition may take (a read cycle; a Spark micro-batch); bounds replay",
    )
    poll_interval_ms: int = Field(default=200, ge=1, description="idle wait when no partition has news")
    partition_refresh_ms: int = Field(default=30_000, ge=1, description="how often partitions are listed")
    metrics_port: int | None = Field(default=None, ge=0, le=65535, description="Prometheus port; null: off")
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
    master: str | None = Field(default=None, description="Spark master URL (spark engine); default local[*]")
    trigger_interval_ms: int = Field(
        default=1000, ge=0, description="how often Spark plans a micro-batch (spark engine)"
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Spark configuration (spark engine)")
    python: str | None = Field(
        default=None,
        description="the Python executors run (spark.pyspark.python), with cdcflow and the pipeline's plugins "
        "installed; default $PYSPARK_PYTHON, else the interpreter running cdcflow (spark engine)",
    )
    executor_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="on a cluster, how long to wait for a first executor before failing with the resources "
        "asked for (spark engine)",
    )


class PipelineConfig(_Strict):
    """The pipeline's own shape; plugin sections are checked against their plugin's model later."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=200)
    source: dict[str, Any]
    transforms: list[dict[str, Any]] = Field(default_factory=list)
    sink: dict[str, Any]
    checkpoint: dict[str, Any] | None = None
    errors: ErrorsConfig = ErrorsConfig()
    engine: EngineConfig = EngineConfig()


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

    @property
    def base_dir(self) -> Path:
        return self.file.parent


def load_pipeline(file: Path | str, registry: PluginLookup, environ: Mapping[str, str] | None = None) -> PipelineSpec:
    """Read, interpolate and validate a pipeline file. Raises a ConfigError subclass."""
    path = Path(file).resolve()
    data, lines = load_yaml_with_lines(path)
    data = interpolate_environment(data, path, lines, environ)
    return parse_pipeline(data, path, registry, lines)


def parse_pipeline(
    data: Any, file: Path, registry: PluginLookup, lines: Mapping[FieldPath, int] | None = None
) -> PipelineSpec:
    lines = lines or {}
    if not isinstance(data, dict):
        raise ConfigFieldError(file, [FieldProblem("", "a mapping of pipeline fields", _describe(data), 1)])
    context = {"base_dir": file.parent}
    try:
        pipeline = PipelineConfig.model_validate(data)
    except ValidationError as exc:
        # Report the plugin sections' problems too, so one `validate` shows everything to fix.
        found = _problems(exc, (), PipelineConfig, lines) + _plugin_section_problems(data, registry, context, lines)
        found.sort(key=lambda p: (p.line is None, p.line or 0))
        raise ConfigFieldError(file, found) from None

    problems: list[FieldProblem] = []

    def resolve(kind: str, section: Mapping[str, Any], path: FieldPath) -> ResolvedPlugin | None:
        resolved, found = resolve_plugin_config(kind, section, path, registry, context, lines)
        problems.extend(found)
        return resolved

    source = resolve("source", pipeline.source, ("source",))
    transforms = [resolve("transform", t, ("transforms", i)) for i, t in enumerate(pipeline.transforms)]
    sink = resolve("sink", pipeline.sink, ("sink",))
    checkpoint_section = pipeline.checkpoint or {"type": "file", "path": f"state/{pipeline.name}"}
    checkpoint = resolve("checkpoint", checkpoint_section, ("checkpoint",))
    dead_letter = (
        resolve("sink", pipeline.errors.dead_letter, ("errors", "dead_letter"))
        if pipeline.errors.dead_letter is not None
        else None
    )
    engine = pipeline.engine.type
    for resolved, where in ((sink, ("sink", "type")), (dead_letter, ("errors", "dead_letter", "type"))):
        engines = getattr(resolved.cls, "engines", None) if resolved is not None else None
        if resolved is not None and engines is not None and engine not in engines:
            problems.append(
                FieldProblem(
                    dotted(where),
                    f"a sink type that runs on the {engine} engine (engine.type)",
                    f"{resolved.config.type!r}, which runs on the {' and '.join(sorted(engines))} engine only",
                    lines.get(where),
                )
            )
    if engine == "spark" and checkpoint is not None and checkpoint.config.type != "file":
        problems.append(
            FieldProblem(
                "checkpoint.type",
                "file (the spark engine keeps offsets in Spark's checkpoint folder, checkpoint.path)",
                repr(checkpoint.config.type),
                lines.get(("checkpoint", "type")),
            )
        )
    if problems:
        problems.sort(key=lambda p: (p.line is None, p.line or 0))
        raise ConfigFieldError(file, problems)
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
    )


def _plugin_section_problems(
    data: Mapping[str, Any], registry: PluginLookup, context: Mapping[str, Any], lines: Mapping[FieldPath, int]
) -> list[FieldProblem]:
    """Problems inside the plugin sections that are at least mappings (the first pass flags the rest)."""
    sections: list[tuple[str, Any, FieldPath]] = [
        ("source", data.get("source"), ("source",)),
        ("sink", data.get("sink"), ("sink",)),
        ("checkpoint", data.get("checkpoint"), ("checkpoint",)),
    ]
    transforms = data.get("transforms")
    if isinstance(transforms, list):
        sections += [("transform", t, ("transforms", i)) for i, t in enumerate(transforms)]
    errors = data.get("errors")
    if isinstance(errors, dict):
        sections.append(("sink", errors.get("dead_letter"), ("errors", "dead_letter")))
    problems: list[FieldProblem] = []
    for kind, section, path in sections:
        if isinstance(section, dict):
            problems += resolve_plugin_config(kind, section, path, registry, context, lines)[1]
    return problems


def resolve_plugin_config(
    kind: str,
    section: Mapping[str, Any],
    path: FieldPath,
    registry: PluginLookup,
    context: Mapping[str, Any],
    lines: Mapping[FieldPath, int],
) -> tuple[ResolvedPlugin | None, list[FieldProblem]]:
    """Find the plugin a section names and validate the section against its config model."""
    type_name = section.get("type")
    if not isinstance(type_name, str):
        found = "nothing" if type_name is None else _describe(type_name)
        line = lines.get((*path, "type"), lines.get(path))
        return None, [FieldProblem(dotted((*path, "type")), f"the name of a {kind} plugin type", found, line)]
    try:
        cls = registry.lookup(kind, type_name)
    except UnknownPluginTypeError as exc:
        expected = f"one of the installed {kind} types ({', '.join(sorted(exc.known)) or 'none'})"
        return None, [FieldProblem(dotted((*path, "type")), expected, repr(type_name), lines.get((*path, "type")))]
    model: type[PluginConfig] = cls.config_model
    try:
        config = model.model_validate(dict(section), context=dict(context))
    except ValidationError as exc:
        return None, _problems(exc, path, model, lines)
    return ResolvedPlugin(kind, cls, config, dotted(path)), []


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


def _lines_of(file: Path) -> Mapping[FieldPath, int]:
    try:
        return load_yaml_with_lines(file)[1]
    except ConfigError:
        return {}  # not a file (built in code): the problems go without lines


def _problems(
    exc: ValidationError, prefix: FieldPath, model: type[BaseModel], lines: Mapping[FieldPath, int]
) -> list[FieldProblem]:
    problems = []
    for error in exc.errors(include_url=False):
        location: FieldPath = (*prefix, *(p for p in error["loc"] if isinstance(p, str | int)))
        line = _nearest_line(location, lines)
        kind = error["type"]
        if kind == "missing":
            problems.append(FieldProblem(dotted(location), "a value (the field is required)", "nothing", line))
        elif kind == "extra_forbidden":
            known = _known_fields(model, tuple(error["loc"][:-1]))
            expected = f"one of the known fields ({', '.join(known)})" if known else "no such field"
            problems.append(FieldProblem(dotted(location), expected, "an unrecognized field", line))
        else:
            problems.append(FieldProblem(dotted(location), _expected_from(error), _describe(error["input"]), line))
    return problems


def _expected_from(error: Mapping[str, Any]) -> str:
    message = str(error["msg"])
    for lead in ("Input should be ", "Value error, ", "String should ", "Input "):
        if message.startswith(lead):
            message = message[len(lead) :]
            break
    return message


def _nearest_line(location: FieldPath, lines: Mapping[FieldPath, int]) -> int | None:
    for end in range(len(location), -1, -1):
        if location[:end] in lines:
            return lines[location[:end]]
    return None


def _known_fields(model: type[BaseModel], location: Sequence[Any]) -> list[str]:
    current: Any = model
    for part in location:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = fields[part].annotation
        current = next((a for a in getattr(current, "__args__", ()) if hasattr(a, "model_fields")), current)
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if fields else []


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}" if not isinstance(value, str) else text
