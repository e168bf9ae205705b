"""Registers the ``tikv`` sink."""

from typing import Any

from plugins.hookspecs import hookimpl
from sinks.tikv.sink import TiKVSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [TiKVSink]
