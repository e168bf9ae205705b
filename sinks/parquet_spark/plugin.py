"""Registers the ``parquet`` sink."""

from typing import Any

from cdcflow.extras import SPARK, Extra
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sinks.parquet_spark.sink import ParquetSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [ParquetSink]


@hookimpl
def cdcflow_required_extras() -> list[Extra]:
    return [SPARK]
