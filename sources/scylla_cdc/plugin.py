"""Registers the ``scylla_cdc`` source."""

from typing import Any

from plugins.hookspecs import hookimpl
from sources.scylla_cdc.source import ScyllaCdcSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [ScyllaCdcSource]
