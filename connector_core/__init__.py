"""cdcflow's runtime: the change event, the plugin contract, pipeline config, the delivery loop, engines, CLI.

Plugin authors need :mod:`connector_core.contract` (the classes to subclass),
:mod:`connector_core.events` (the records) and :mod:`connector_core.errors` (what to raise).
"""

from connector_core.contract import (
    Checkpoint,
    CheckpointStore,
    CheckpointStoreConfig,
    Converter,
    Offset,
    Partition,
    PluginConfig,
    PluginContext,
    Rejected,
    Sink,
    Source,
    SparkBatchWriter,
    Transform,
)
from connector_core.events import ChangeEvent, Column, Op, Record, RowSchema, SchemaChangeEvent, SourceInfo

__all__ = [
    "ChangeEvent",
    "Checkpoint",
    "CheckpointStore",
    "CheckpointStoreConfig",
    "Column",
    "Converter",
    "Offset",
    "Op",
    "Partition",
    "PluginConfig",
    "PluginContext",
    "Record",
    "Rejected",
    "RowSchema",
    "SchemaChangeEvent",
    "Sink",
    "Source",
    "SourceInfo",
    "SparkBatchWriter",
    "Transform",
]
