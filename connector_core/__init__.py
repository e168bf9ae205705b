"""cdcflow: change data capture configured in YAML and extended by plugins.

This package is the public API a plugin author needs: the classes to subclass (:class:`Source`,
:class:`Sink`, :class:`Transform`, :class:`Converter`, :class:`CheckpointStore`), the records
(:class:`ChangeEvent`, :class:`SchemaChangeEvent`), the optional capabilities a plugin may add
(:mod:`cdcflow.capabilities`), the errors to raise (:mod:`cdcflow.errors`)
and :data:`hookimpl` to register them. The runtime lives in submodules (``cdcflow.pipeline``,
``cdcflow.worker``, ``cdcflow.spark_engine``...); the built-in plugins under ``cdcflow.sources``,
``cdcflow.sinks`` and ``cdcflow.plugins``.
"""

from cdcflow.capabilities import SparkBatchWriter
from cdcflow.contract import (
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
    Transform,
)
from cdcflow.errors import CdcflowError
from cdcflow.events import ChangeEvent, Column, Op, Record, RowSchema, SchemaChangeEvent, SourceInfo, UserType
from cdcflow.plugins.hookspecs import hookimpl

__all__ = [
    "CdcflowError",
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
    "UserType",
    "hookimpl",
]
