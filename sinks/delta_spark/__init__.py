"""The ``delta`` sink: Delta Lake tables written by Spark, a mirror by key or a change log, exactly
once per micro-batch."""

from cdcflow.sinks.delta_spark.exceptions import (
    DeltaAppIdReusedError,
    DeltaSchemaConflictError,
    DeltaSinkError,
    MirrorUnsupportedChangeError,
)
from cdcflow.sinks.delta_spark.mirror import MirrorLayout, fold_partition
from cdcflow.sinks.delta_spark.sink import DELTA_SESSION_CONF, DeltaSink, DeltaSinkConfig

__all__ = [
    "DELTA_SESSION_CONF",
    "DeltaAppIdReusedError",
    "DeltaSchemaConflictError",
    "DeltaSink",
    "DeltaSinkConfig",
    "DeltaSinkError",
    "MirrorLayout",
    "MirrorUnsupportedChangeError",
    "fold_partition",
]
