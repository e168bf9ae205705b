"""Optional dependency groups ("extras") and how a missing one is reported.

The ``cdcflow`` distribution's core (``pip install cdcflow``) runs the worker engine with the
datagen and Kafka sources, the Kafka and file sinks, both converters and both checkpoint stores.
Each connector with heavy client libraries is an extra (pyproject.toml's
``[project.optional-dependencies]``; ``cdcflow[all]`` is all of them, and scripts/setup.sh installs
that). A plugin states the extras it needs through the ``cdcflow_required_extras`` hook; the
registry then lists its types as unavailable and refuses to build them with a
:class:`~cdcflow.errors.MissingExtraError` naming the extra and the pip command, instead of an
``ImportError`` from deep inside a read.

Whether an extra is installed is decided by finding its modules' specs, not importing them:
listing plugins must stay cheap (pyspark takes seconds to import).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdcflow.errors import MissingExtraError

if TYPE_CHECKING:
    from cdcflow.config import PipelineSpec

__all__ = [
    "CASSANDRA",
    "EXTRAS",
    "GROUP",
    "SCYLLA",
    "SPARK",
    "TIKV",
    "Extra",
    "missing_extra",
    "require_engine_extras",
    "require_extras",
]


@dataclass(frozen=True)
class Extra:
    """One optional dependency group of a distribution, and the top-level modules its packages install."""

    name: str
    modules: tuple[str, ...]
    distribution: str = "cdcflow"

    @property
    def requirement(self) -> str:
        """What pip installs, ``cdcflow[cassandra]``."""
        return f"{self.distribution}[{self.name}]"

    def missing_module(self) -> str | None:
        """The first of this extra's modules that cannot be found, or None when all can."""
        for module in self.modules:
            if not _module_found(module):
                return module
        return None


def _module_found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a dotted name whose parent is missing, or an import hook refusing it
        return False


# The distribution's extras; test_packaging checks this table against pyproject.toml.
CASSANDRA = Extra("cassandra", ("cassandra", "cramjam"))  # cassandra-driver; compressed commit-log segments
SCYLLA = Extra("scylla", ("cassandra",))  # cassandra-driver (ScyllaDB speaks CQL)
TIKV = Extra("tikv", ("grpc", "google.protobuf"))  # grpcio, protobuf
SPARK = Extra("spark", ("pyspark", "pyarrow", "pandas"))  # the spark engine, the parquet and delta sinks
GROUP = Extra("group", ("faust",))  # faust-streaming: worker groups' coordinator and REST web server
EXTRAS: tuple[Extra, ...] = (CASSANDRA, SCYLLA, TIKV, SPARK, GROUP)


def missing_extra(needed_by: str, extras: Iterable[Extra]) -> MissingExtraError | None:
    """The error saying which of ``extras`` ``needed_by`` lacks, or None when all are installed."""
    for extra in extras:
        module = extra.missing_module()
        if module is not None:
            return MissingExtraError(needed_by, extra.requirement, module)
    return None


def require_extras(needed_by: str, extras: Iterable[Extra]) -> None:
    """Raise :class:`~cdcflow.errors.MissingExtraError` unless every one of ``extras`` is installed."""
    error = missing_extra(needed_by, extras)
    if error is not None:
        raise error


def require_engine_extras(spec: PipelineSpec) -> None:
    """The engine a pipeline runs on needs its extra: Spark for ``engine.type: spark``, faust for ``engine.group``."""
    if spec.engine.type == "spark":
        require_extras("engine spark", [SPARK])
    if spec.group is not None:
        require_extras("engine.group", [GROUP])
