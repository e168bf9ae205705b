"""What each engine can run: one rule, checked when a pipeline loads and again when an engine starts.

* a sink, and the dead-letter sink, runs on the engines its class names (``Sink.engines``: the
  parquet and delta sinks write Spark micro-batches, so they run on the spark engine only);
* the spark engine keeps a query's offsets in Spark's checkpoint folder: ``checkpoint.type: file``;
* ``sink.delivery: exactly_once`` runs on the worker engine only;
* one ``cdcflow run`` runs the pipelines of one engine.

Loading a file reports a mismatch as a field problem with its line (``cdcflow validate``);
``cdcflow run --engine`` moves a pipeline to an engine after that, so each engine refuses one at
its start (:func:`refuse_engine_mismatches`) in the same words, before any plugin is opened.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcflow._yaml import FieldPath, dotted
from cdcflow.errors import EngineUnsupportedError
from cdcflow.transactions import exactly_once_requested

if TYPE_CHECKING:
    from cdcflow.config import EngineType, PipelineSpec, ResolvedPlugin

__all__ = ["EngineMismatch", "engine_mismatches", "one_engine", "refuse_engine_mismatches", "sink_engines"]

_EVERY_ENGINE: frozenset[str] = frozenset({"worker", "spark"})


@dataclass(frozen=True)
class EngineMismatch:
    """A part of a pipeline its engine cannot run: the field, what the engine needs there, what is there."""

    path: FieldPath
    expected: str
    found: str

    def describe(self) -> str:
        return f"field {dotted(self.path)}: expected {self.expected}, found {self.found}"


def sink_engines(sink_class: type[Any]) -> frozenset[str]:
    """The engines a sink class runs on."""
    engines: frozenset[str] = getattr(sink_class, "engines", _EVERY_ENGINE)
    return engines


def engine_mismatches(
    engine_type: str,
    sink: ResolvedPlugin | None,
    dead_letter: ResolvedPlugin | None,
    checkpoint: ResolvedPlugin | None,
) -> list[EngineMismatch]:
    """What of the sinks and the checkpoint store ``engine_type`` cannot run (None: not resolved)."""
    mismatches = []
    for resolved, path in ((sink, ("sink", "type")), (dead_letter, ("errors", "dead_letter", "type"))):
        if resolved is None:
            continue
        engines = sink_engines(resolved.cls)
        if engine_type not in engines:
            mismatches.append(
                EngineMismatch(
                    path,
                    f"a sink type that runs on the {engine_type} engine (engine.type)",
                    f"{resolved.config.type!r}, which runs on the {' and '.join(sorted(engines))} engine only",
                )
            )
    if engine_type == "spark" and sink is not None and exactly_once_requested(sink.config):
        mismatches.append(
            EngineMismatch(
                ("sink", "delivery"),
                "at_least_once with engine.type spark: Spark runs the sink in its tasks, outside the checkpoint "
                "store's transactions, and its file checkpoint (where a micro-batch's offsets are) cannot join a "
                "Kafka transaction, so a batch re-run after a crash writes its records again (docs/delivery.md)",
                "'exactly_once'",
            )
        )
    if engine_type == "spark" and checkpoint is not None and checkpoint.config.type != "file":
        mismatches.append(
            EngineMismatch(
                ("checkpoint", "type"),
                "file (the spark engine keeps offsets in Spark's checkpoint folder, checkpoint.path)",
                repr(checkpoint.config.type),
            )
        )
    return mismatches


def refuse_engine_mismatches(spec: PipelineSpec) -> None:
    """Raise :class:`EngineUnsupportedError` naming every part of ``spec`` its engine cannot run."""
    mismatches = engine_mismatches(spec.engine.type, spec.sink, spec.dead_letter, spec.checkpoint)
    if mismatches:
        raise EngineUnsupportedError(
            f"{spec.file}: pipeline {spec.name} on the {spec.engine.type} engine: "
            + "; ".join(m.describe() for m in mismatches)
        )


def one_engine(specs: Iterable[PipelineSpec]) -> EngineType:
    """The engine all of ``specs`` run on; :class:`EngineUnsupportedError` when they mix engines."""
    by_engine: dict[EngineType, list[str]] = {}
    for spec in specs:
        by_engine.setdefault(spec.engine.type, []).append(str(spec.file))
    if len(by_engine) > 1:
        mix = "; ".join(f"{engine}: {', '.join(files)}" for engine, files in sorted(by_engine.items()))
        raise EngineUnsupportedError(
            f"these files mix engine types ({mix}); run worker and spark pipelines in separate commands"
        )
    return next(iter(by_engine), "worker")
