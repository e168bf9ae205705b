"""Registers the ``kafka`` source."""

from typing import Any

from plugins.hookspecs import hookimpl


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return []
