"""cdcflow's plugin registry: hook specifications, entry-point loading, built-in registration."""

from cdcflow.plugins._registry import ENTRY_POINT_GROUP, KINDS, PluginRegistry, RegisteredType
from cdcflow.plugins.hookspecs import CdcflowHookSpecs, hookimpl, hookspec

__all__ = [
    "ENTRY_POINT_GROUP",
    "KINDS",
    "CdcflowHookSpecs",
    "PluginRegistry",
    "RegisteredType",
    "hookimpl",
    "hookspec",
]
