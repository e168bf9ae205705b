"""Registers the plugin types of ``sources/scylla_cdc`` (none yet: the package is being built)."""

from typing import Any

from plugins.hookspecs import hookimpl


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return []
