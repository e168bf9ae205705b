"""Registers the ``delta`` sink."""

from typing import Any

from cdcflow.extras import SPARK, Extra
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sinks.delta_spark.sink import DeltaSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [DeltaSink]


@hookimpl
def cdcflow_required_extras() -> list[Extra]:
    return [SPARK]
