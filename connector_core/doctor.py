"""``cdcflow doctor FILE``: every prerequisite check of a pipeline's plugins and engine, as a table.

The checks are the plugins' own (``check_prerequisites``, :mod:`cdcflow.prerequisites`); this
module builds each plugin of the file without opening it, asks, and lays the answers out. A
plugin whose system does not answer at all is one ``fail`` row naming it, never a traceback:
doctor is where one looks when things do not work.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcflow.config import PipelineSpec
from cdcflow.contract import Offset, PluginContext
from cdcflow.prerequisites import CheckResult, CheckStatus, PluginChecks, PrerequisiteScope, plugin_place
from cdcflow.transactions import exactly_once_requested

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["check_pipeline", "render_checks"]

log = logging.getLogger("cdcflow.doctor")

_CHECK_WIDTH = 40
_TEXT_WIDTH = 70


def check_pipeline(spec: PipelineSpec, registry: PluginRegistry) -> list[PluginChecks]:
    """Every check of ``spec``'s plugins (source, transforms, sink, checkpoint store, dead
    letters) and of its engine; plugins with none are left out."""
    context = PluginContext(pipeline=spec.name, pipeline_file=spec.file, logger=logging.getLogger("cdcflow.doctor"))
    scope = PrerequisiteScope(
        thorough=True,
        timeout_s=spec.engine.startup_timeout_s,
        # A worker group's checkpoints, and exactly-once delivery's records with them, go in transactions.
        transactions=spec.group is not None or exactly_once_requested(spec.sink.config),
        committed_offsets=lambda: _committed_offsets(spec, registry, context),
    )
    reports = []
    for resolved in (spec.source, *spec.transforms, spec.sink, spec.checkpoint, spec.dead_letter):
        if resolved is None:
            continue
        plugin = registry.create(resolved, context)
        reports.append(PluginChecks(plugin_place(plugin), _checks_of(plugin, scope)))
    if spec.engine.type == "spark":
        from cdcflow.spark_engine.prerequisites import check_spark_engine

        reports.append(
            PluginChecks("engine (spark)", check_spark_engine(spec.spark_engine, spec.engine.startup_timeout_s))
        )
    return [report for report in reports if report.results]


def _checks_of(plugin: Any, scope: PrerequisiteScope) -> list[CheckResult]:
    try:
        plugin.check_reachable(scope.timeout_s)
        return list(plugin.check_prerequisites(scope))
    except Exception as exc:  # whatever a plugin raises (its driver's own errors too) is a finding here
        return [
            CheckResult.fail(
                "its system answers",
                f"{type(exc).__name__}: {exc}",
                "make the system reachable with the settings the file gives, then run cdcflow doctor again",
            )
        ]


def _committed_offsets(spec: PipelineSpec, registry: PluginRegistry, context: PluginContext) -> Mapping[str, Offset]:
    """What the pipeline committed, by partition id: its checkpoint store's, or for the spark
    engine the offsets of the last batch Spark committed."""
    if spec.engine.type == "spark":
        from cdcflow.spark_engine.offsets import checkpoint_location, last_committed_batch

        found = last_committed_batch(checkpoint_location(spec))
        logged = found[1] if found is not None else {}
        return {str(pid): dict(offset) for pid, offset in logged.items() if isinstance(offset, Mapping)}
    store = registry.create(spec.checkpoint, context)
    store.check_reachable(spec.engine.startup_timeout_s)
    store.open()
    try:
        return {pid: checkpoint.offset for pid, checkpoint in store.load().items()}
    finally:
        store.close()


def render_checks(spec: PipelineSpec, reports: Sequence[PluginChecks]) -> str:
    """The checks as a table: status, check, what was found and what to fix, by plugin."""
    lines = [f"pipeline {spec.name} ({spec.file})", f"  {'STATUS':<6} {'CHECK':<{_CHECK_WIDTH}} FOUND / WHAT TO FIX"]
    counts = dict.fromkeys(CheckStatus, 0)
    for report in reports:
        lines.append(f"  {report.where}")
        for result in report.results:
            counts[result.status] += 1
            status = str(result.status).upper() if result.status is not CheckStatus.OK else "ok"
            check_lines = textwrap.wrap(result.check, _CHECK_WIDTH) or [""]
            text = textwrap.wrap(result.detail, _TEXT_WIDTH) or [""]
            if result.fix:
                text += textwrap.wrap(f"fix: {result.fix}", _TEXT_WIDTH)
            for row in range(max(len(check_lines), len(text))):
                check = check_lines[row] if row < len(check_lines) else ""
                found = text[row] if row < len(text) else ""
                head = f"  {status if row == 0 else '':<6} {check:<{_CHECK_WIDTH}} "
                lines.append((head + found).rstrip())
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    lines.append(f"  {sum(counts.values())} checks: {summary or 'none'}")
    return "\n".join(lines)
