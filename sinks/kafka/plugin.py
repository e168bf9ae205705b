"""Registers the ``kafka`` sink and the ``kafka`` checkpoint store."""

from typing import Any

from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sinks.kafka.checkpoint_store import KafkaCheckpointStore
from cdcflow.sinks.kafka.sink import KafkaSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [KafkaSink]


@hookimpl
def cdcflow_checkpoint_store_types() -> list[type[Any]]:
    return [KafkaCheckpointStore]
