"""Registers the ``file`` sink."""

from typing import Any

from plugins.hookspecs import hookimpl
from sinks.file.sink import FileSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [FileSink]
