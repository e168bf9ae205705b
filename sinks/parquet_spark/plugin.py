"""Registers the ``parquet`` sink."""

from typing import Any

from plugins.hookspecs import hookimpl
from sinks.parquet_spark.sink import ParquetSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [ParquetSink]
