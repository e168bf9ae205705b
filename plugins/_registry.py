"""The registry: loads plugins from entry points and hands out plugin classes by kind and type name."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from cdcflow.config import ResolvedPlugin, validate_plugin_config
from cdcflow.contract import Converter, PluginContext, Sink
from cdcflow.errors import MissingExtraError, PluginConflictError, PluginLoadError, UnknownPluginTypeError
from cdcflow.extras import Extra, missing_extra
from cdcflow.plugins.hookspecs import PROJECT_NAME, CdcflowHookSpecs

if TYPE_CHECKING:
    from cdcflow.cli import CommandLine

__all__ = ["ENTRY_POINT_GROUP", "KINDS", "PluginRegistry", "RegisteredType"]

ENTRY_POINT_GROUP = "cdcflow.plugins"
AUTOLOAD_SWITCH = "CDCFLOW_DISABLE_PLUGIN_AUTOLOAD"
BUILTIN_DISTRIBUTION = "cdcflow"

log = logging.getLogger("cdcflow.plugins")

# kind -> the hook that contributes it
KINDS: Mapping[str, str] = {
    "source": "cdcflow_source_types",
    "transform": "cdcflow_transform_types",
    "sink": "cdcflow_sink_types",
    "converter": "cdcflow_converter_types",
    "checkpoint": "cdcflow_checkpoint_store_types",
}


@dataclass(frozen=True)
class RegisteredType:
    kind: str
    type_name: str
    cls: type[Any]
    provider: str  # "<distribution> (<entry point>)" or the module name
    unavailable: MissingExtraError | None = None  # an extra this type needs is not installed

    @property
    def builtin(self) -> bool:
        return self.provider.startswith(f"{BUILTIN_DISTRIBUTION} (")


class PluginRegistry:
    """Plugin classes by kind and type name.

    Built-ins and third-party packages arrive the same way, through the ``cdcflow.plugins``
    entry-point group. A third-party plugin that fails to import is skipped with a warning naming
    it (see :attr:`load_failures`); two plugins claiming one type name is an error naming both.
    Setting ``CDCFLOW_DISABLE_PLUGIN_AUTOLOAD=1`` loads only the built-ins.
    """

    def __init__(self) -> None:
        self._manager = pluggy.PluginManager(PROJECT_NAME)
        self._manager.add_hookspecs(CdcflowHookSpecs)
        self._types: dict[str, dict[str, RegisteredType]] = {kind: {} for kind in KINDS}
        self.load_failures: list[PluginLoadError] = []

    @classmethod
    def from_entry_points(cls, environ: Mapping[str, str] | None = None) -> PluginRegistry:
        env = os.environ if environ is None else environ
        registry = cls()
        third_party_allowed = env.get(AUTOLOAD_SWITCH, "").lower() not in ("1", "true", "yes")
        for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=_builtin_first):
            is_builtin = _distribution_name(entry_point) == BUILTIN_DISTRIBUTION
            if not is_builtin and not third_party_allowed:
                continue
            registry.load_entry_point(entry_point, required=is_builtin)
        return registry

    def load_entry_point(self, entry_point: EntryPoint, required: bool) -> None:
        provider = f"{_distribution_name(entry_point)} ({entry_point.name})"
        try:
            plugin = entry_point.load()
        except Exception as exc:
            failure = PluginLoadError(provider, exc)
            if required:
                raise failure from exc
            log.warning("%s; its plugin types are not available", failure)
            self.load_failures.append(failure)
            return
        self.register(plugin, provider)

    def register(self, plugin: object, provider: str) -> None:
        """Register a plugin object (usually a module with ``@hookimpl`` functions)."""
        self._manager.register(plugin, name=provider)
        extras = _required_extras(plugin)
        for kind, hook_name in KINDS.items():
            implementation = getattr(plugin, hook_name, None)
            if implementation is None:
                continue
            for plugin_cls in implementation():
                self._add(kind, plugin_cls, provider, extras)

    def _add(self, kind: str, plugin_cls: type[Any], provider: str, extras: list[Extra]) -> None:
        type_name = plugin_cls.type_name
        existing = self._types[kind].get(type_name)
        if existing is not None and existing.cls is not plugin_cls:
            raise PluginConflictError(kind, type_name, existing.provider, provider)
        unavailable = missing_extra(f"{kind} {type_name}", extras)
        self._types[kind][type_name] = RegisteredType(kind, type_name, plugin_cls, provider, unavailable)

    def add_cli_commands(self, commands: CommandLine) -> None:
        """Let every plugin add its ``cdcflow`` subcommands (:meth:`CdcflowHookSpecs.cdcflow_cli_commands`)."""
        self._manager.hook.cdcflow_cli_commands(commands=commands)

    # --- lookups -------------------------------------------------------------------------------

    def lookup(self, kind: str, type_name: str) -> type[Any]:
        """The class of a type a pipeline names; :class:`MissingExtraError` when it needs an extra not installed."""
        try:
            registered = self._types[kind][type_name]
        except KeyError:
            raise UnknownPluginTypeError(kind, type_name, list(self._types[kind])) from None
        missing = registered.unavailable
        if missing is not None:
            raise MissingExtraError(missing.needed_by, missing.requirement, missing.missing_module)
        return registered.cls

    def registered(self, kind: str | None = None) -> list[RegisteredType]:
        kinds = [kind] if kind else list(KINDS)
        return [t for k in kinds for _, t in sorted(self._types[k].items())]

    # --- building plugin instances -----------------------------------------------------------

    def create(self, resolved: ResolvedPlugin, context: PluginContext) -> Any:
        """An instance of ``resolved``'s plugin class, with this registry as its factory. Any: the
        class is found by the name a file gives, so the caller states what kind it asked for
        (``sink: Sink[Any] = registry.create(spec.sink, context)``)."""
        return resolved.cls(resolved.config, _with_factory(context, self, resolved.field_path))

    def create_sink(self, config: Mapping[str, Any], context: PluginContext) -> Sink[Any]:
        resolved = validate_plugin_config(
            "sink", config, self, context.pipeline_file, context.field_path, context.base_dir
        )
        sink: Sink[Any] = self.create(resolved, context)
        return sink

    def create_converter(self, config: Mapping[str, Any] | str, context: PluginContext) -> Converter[Any]:
        section = {"type": config} if isinstance(config, str) else config
        resolved = validate_plugin_config(
            "converter", section, self, context.pipeline_file, context.field_path, context.base_dir
        )
        converter: Converter[Any] = self.create(resolved, context)
        return converter


def _required_extras(plugin: object) -> list[Extra]:
    hook = getattr(plugin, "cdcflow_required_extras", None)
    return list(hook()) if hook is not None else []


def _with_factory(context: PluginContext, registry: PluginRegistry, field_path: str) -> PluginContext:
    return replace(context, factory=registry, field_path=field_path)


def _distribution_name(entry_point: EntryPoint) -> str:
    dist = entry_point.dist
    return dist.name if dist is not None else entry_point.module


def _builtin_first(entry_point: EntryPoint) -> tuple[bool, str]:
    # Built-ins load first so that a third-party plugin clashing with one is the one named second.
    return _distribution_name(entry_point) != BUILTIN_DISTRIBUTION, entry_point.name
