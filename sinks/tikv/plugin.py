"""Registers the plugin types of ``sinks/tikv`` (none yet: the package is being built)."""

from typing import Any

from plugins.hookspecs import hookimpl


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return []
