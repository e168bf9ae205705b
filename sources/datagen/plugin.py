"""Registers the ``datagen`` source."""

from typing import Any

from plugins.hookspecs import hookimpl
from sources.datagen.source import DatagenSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [DatagenSource]
