"""Registers the ``kafka`` sink."""

from typing import Any

from plugins.hookspecs import hookimpl
from sinks.kafka.sink import KafkaSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [KafkaSink]
