"""What a plugin needs of the live systems before it can run without losing anything, checked.

Each plugin may implement ``check_prerequisites(scope)`` (:class:`cdcflow.contract.Source` and the
other bases): a Cassandra source that CDC is on for each of its tables, a Kafka checkpoint store
that its topic is compacted, a TiKV source that the cluster runs API V2. The answers are
:class:`CheckResult` rows: what was checked, how it stands, what was found and what to do.

Two callers ask, pytest-style: the core owns the commands, the plugins own the checks.

* ``cdcflow doctor FILE`` (:mod:`cdcflow.doctor`) asks every plugin of a pipeline for every
  check (``scope.thorough``), on plugins it never opens, and prints them as a table; it exits
  non-zero on any ``fail``.
* ``cdcflow run`` asks each plugin right after opening it for the cheap checks only (``thorough``
  false: a query or two on the connection the plugin opened anyway), and refuses to start on a
  ``fail`` (:class:`~cdcflow.errors.PrerequisiteFailedError`) instead of running a pipeline that
  delivers nothing, or loses changes, without a word.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cdcflow.errors import PrerequisiteFailedError, TransientError

__all__ = [
    "CheckResult",
    "CheckStatus",
    "PluginChecks",
    "PrerequisiteScope",
    "plugin_place",
    "refuse_unmet_prerequisites",
]

log = logging.getLogger("cdcflow.prerequisites")


class CheckStatus(StrEnum):
    OK = "ok"
    WARN = "warn"  # runs, but something an operator should know or change
    FAIL = "fail"  # would deliver nothing, or lose changes: ``run`` refuses, ``doctor`` exits 1
    SKIP = "skip"  # could not be checked here (no permission to read it, not this engine)


@dataclass(frozen=True)
class CheckResult:
    """One check: ``check`` names what was checked and on what (``CDC on for shop.orders``),
    ``detail`` what was found, ``fix`` what to do about it (empty when nothing is to be done)."""

    check: str
    status: CheckStatus
    detail: str
    fix: str = ""

    @classmethod
    def ok(cls, check: str, detail: str) -> CheckResult:
        return cls(check, CheckStatus.OK, detail)

    @classmethod
    def warn(cls, check: str, detail: str, fix: str) -> CheckResult:
        return cls(check, CheckStatus.WARN, detail, fix)

    @classmethod
    def fail(cls, check: str, detail: str, fix: str) -> CheckResult:
        return cls(check, CheckStatus.FAIL, detail, fix)

    @classmethod
    def skip(cls, check: str, detail: str, fix: str = "") -> CheckResult:
        return cls(check, CheckStatus.SKIP, detail, fix)

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "status": str(self.status), "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class PrerequisiteScope:
    """What a plugin's ``check_prerequisites`` is asked for.

    ``thorough``: every check (``cdcflow doctor``; the plugin is not open, so it connects on its
    own and leaves nothing behind), or only the cheap ones (``cdcflow run`` at start, right after
    ``open``: reuse what ``open`` connected). ``timeout_s`` bounds each system's answer.
    ``transactions``: the pipeline commits checkpoints in Kafka transactions (a worker group).
    ``committed_offsets``: the pipeline's committed offsets by partition id, read when called
    (doctor only; None where not known).
    """

    thorough: bool
    timeout_s: float
    transactions: bool = False
    committed_offsets: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None


@dataclass(frozen=True)
class PluginChecks:
    """The checks of one plugin of a pipeline: ``where`` names it as the file does (``source
    (cassandra_commitlog)``)."""

    where: str
    results: Sequence[CheckResult]

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status is CheckStatus.FAIL]


def plugin_place(plugin: Any) -> str:
    """Where a plugin sits in its pipeline file, and its type: ``source (cassandra_commitlog)``."""
    return f"{plugin.context.field_path or type(plugin).__name__} ({plugin.config.type})"


def refuse_unmet_prerequisites(pipeline: str, plugins: Sequence[Any], scope: PrerequisiteScope) -> None:
    """``cdcflow run``'s start: each plugin's cheap checks; warnings logged, and every failure of
    every plugin in one :class:`~cdcflow.errors.PrerequisiteFailedError`. A check that could not
    reach its system is logged and passed: the plugin opened, so the pipeline may run."""
    failed: list[tuple[str, str, str, str]] = []
    for plugin in plugins:
        where = plugin_place(plugin)
        try:
            results = plugin.check_prerequisites(scope)
        except TransientError as exc:
            log.warning("pipeline %s: %s: prerequisites not checked (%s: %s)", pipeline, where, type(exc).__name__, exc)
            continue
        for result in results:
            if result.status is CheckStatus.FAIL:
                failed.append((where, result.check, result.detail, result.fix))
            elif result.status is CheckStatus.WARN:
                log.warning("pipeline %s: %s: %s: %s; %s", pipeline, where, result.check, result.detail, result.fix)
    if failed:
        raise PrerequisiteFailedError(pipeline, failed)
