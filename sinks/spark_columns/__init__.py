"""Code the Spark table sinks share (``parquet``, ``delta``): typed columns from change rows."""

from cdcflow.sinks.spark_columns.columns import (
    ENVELOPE_COLUMNS,
    TableSchemaConflictError,
    decimal_type,
    keep_or_widen,
    merge_table_columns,
    native_values,
)

__all__ = [
    "ENVELOPE_COLUMNS",
    "TableSchemaConflictError",
    "decimal_type",
    "keep_or_widen",
    "merge_table_columns",
    "native_values",
]
