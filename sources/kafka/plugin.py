"""Registers the ``kafka`` source."""

from typing import Any

from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sources.kafka.source import KafkaSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [KafkaSource]
