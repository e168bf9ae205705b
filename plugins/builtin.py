"""Registers the plugins that live in ``connector_core``: transforms, converters, the file checkpoint store.

Registered through the ``cdcflow.plugins`` entry-point group like any third-party plugin.
"""

from typing import Any

from cdcflow.checkpoints import FileCheckpointStore
from cdcflow.converters import AvroConverter, JsonConverter
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.transforms import FilterTransform, MaskTransform, RouteTransform, UnwrapTransform


@hookimpl
def cdcflow_transform_types() -> list[type[Any]]:
    return [FilterTransform, RouteTransform, MaskTransform, UnwrapTransform]


@hookimpl
def cdcflow_converter_types() -> list[type[Any]]:
    return [JsonConverter, AvroConverter]


@hookimpl
def cdcflow_checkpoint_store_types() -> list[type[Any]]:
    return [FileCheckpointStore]
