"""Registers the plugins that live in ``connector_core``: transforms, converters, the file checkpoint store.

Registered through the ``cdcflow.plugins`` entry-point group like any third-party plugin.
"""

from typing import Any

from connector_core.checkpoints import FileCheckpointStore
from connector_core.converters import AvroConverter, JsonConverter
from connector_core.transforms import FilterTransform, MaskTransform, RouteTransform, UnwrapTransform
from plugins.hookspecs import hookimpl


@hookimpl
def cdcflow_transform_types() -> list[type[Any]]:
    return [FilterTransform, RouteTransform, MaskTransform, UnwrapTransform]


@hookimpl
def cdcflow_converter_types() -> list[type[Any]]:
    return [JsonConverter, AvroConverter]


@hookimpl
def cdcflow_checkpoint_store_types() -> list[type[Any]]:
    return [FileCheckpointStore]
