"""Registers the ``parquet`` sink."""

from typing import Any

from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sinks.parquet_spark.sink import ParquetSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [ParquetSink]
