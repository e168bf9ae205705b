"""Registers the ``datagen`` source."""

from typing import Any

from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sources.datagen.source import DatagenSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [DatagenSource]
