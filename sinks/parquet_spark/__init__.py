"""The ``parquet`` sink: a Parquet change log written by Spark, exactly once per micro-batch."""

from cdcflow.sinks.parquet_spark.sink import (
    ParquetSchemaConflictError,
    ParquetSink,
    ParquetSinkConfig,
    merge_table_columns,
)

__all__ = ["ParquetSchemaConflictError", "ParquetSink", "ParquetSinkConfig", "merge_table_columns"]
