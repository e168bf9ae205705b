"""Registers the ``scylla_cdc`` source."""

from typing import Any

from cdcflow.extras import SCYLLA, Extra
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [ScyllaCdcSource]


@hookimpl
def cdcflow_required_extras() -> list[Extra]:
    return [SCYLLA]
