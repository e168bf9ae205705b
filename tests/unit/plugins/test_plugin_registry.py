"""The registry: built-ins by entry point, conflicts named, broken third-party plugins skipped."""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint
from types import SimpleNamespace
from typing import Any

import pytest

from cdcflow.errors import PluginConflictError, PluginLoadError, UnknownPluginTypeError
from cdcflow.plugins import PluginRegistry
from cdcflow.sources.datagen import DatagenSource


def test_builtins_are_registered_through_entry_points() -> None:
    registry = PluginRegistry.from_entry_points()
    names = {(t.kind, t.type_name) for t in registry.registered() if t.builtin}
    assert {
        ("source", "datagen"),
        ("source", "kafka"),
        ("sink", "kafka"),
        ("sink", "file"),
        ("transform", "filter"),
        ("transform", "route"),
        ("transform", "mask"),
        ("transform", "unwrap"),
        ("converter", "json"),
        ("converter", "avro"),
        ("checkpoint", "file"),
        ("checkpoint", "kafka"),
    } <= names
    assert registry.lookup("source", "datagen") is DatagenSource


def _plugin_with_source(cls: type[Any]) -> SimpleNamespace:
    return SimpleNamespace(cdcflow_source_types=lambda: [cls])


def test_two_plugins_claiming_one_type_name_is_an_error_naming_both() -> None:
    class Impostor(DatagenSource):
        pass

    registry = PluginRegistry()
    registry.register(_plugin_with_source(DatagenSource), "package-a (a)")
    with pytest.raises(PluginConflictError) as caught:
        registry.register(_plugin_with_source(Impostor), "package-b (b)")
    assert "source type 'datagen'" in str(caught.value)
    assert "package-a (a)" in str(caught.value) and "package-b (b)" in str(caught.value)


def test_unknown_type_lists_what_is_installed() -> None:
    registry = PluginRegistry()
    registry.register(_plugin_with_source(DatagenSource), "p")
    with pytest.raises(UnknownPluginTypeError, match="installed source types: datagen"):
        registry.lookup("source", "scylla")


def test_a_broken_third_party_plugin_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    registry = PluginRegistry.from_entry_points()
    broken = EntryPoint(name="broken", value="cdcflow_no_such_module.plugin", group="cdcflow.plugins")
    with caplog.at_level(logging.WARNING, logger="cdcflow.plugins"):
        registry.load_entry_point(broken, required=False)
    [failure] = registry.load_failures
    assert isinstance(failure, PluginLoadError)
    assert "cdcflow_no_such_module" in str(failure) and "ModuleNotFoundError" in str(failure)
    assert "cdcflow_no_such_module" in caplog.text
    assert registry.lookup("source", "datagen") is DatagenSource  # built-ins unaffected


def test_a_broken_builtin_is_fatal() -> None:
    registry = PluginRegistry()
    broken = EntryPoint(name="broken", value="cdcflow_no_such_module.plugin", group="cdcflow.plugins")
    with pytest.raises(PluginLoadError):
        registry.load_entry_point(broken, required=True)
