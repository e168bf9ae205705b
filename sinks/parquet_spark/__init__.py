"""The ``parquet`` sink: a Parquet change log written by Spark, exactly once per micro-batch."""

from sinks.parquet_spark.sink import ParquetSink, ParquetSinkConfig

__all__ = ["ParquetSink", "ParquetSinkConfig"]
