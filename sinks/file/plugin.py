"""Registers the ``file`` sink."""

from typing import Any

from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sinks.file.sink import FileSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [FileSink]
