"""Every hook a cdcflow plugin can implement, in one place.

A plugin is a module (or any object) with functions marked ``@hookimpl``, registered through the
``cdcflow.plugins`` entry-point group::

    [project.entry-points."cdcflow.plugins"]
    my-plugin = "my_package.cdcflow_plugin"

The data-path and state hooks return a list of plugin classes. A class carries its ``type_name`` (what a pipeline
file writes as ``type:``) and its ``config_model`` (a :class:`~cdcflow.contract.PluginConfig`
subclass). Hooks are called once, when the registry loads; they must not do I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from cdcflow.cli import CommandLine
    from cdcflow.extras import Extra

__all__ = ["PROJECT_NAME", "CdcflowHookSpecs", "hookimpl", "hookspec"]

PROJECT_NAME = "cdcflow"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class CdcflowHookSpecs:
    """The hook specifications, grouped by what a plugin contributes."""

    # --- data path ---------------------------------------------------------------------------

    @hookspec
    def cdcflow_source_types(self) -> list[type[Any]]:
        """Source classes (subclasses of :class:`cdcflow.contract.Source`) this plugin provides."""
        raise NotImplementedError

    @hookspec
    def cdcflow_transform_types(self) -> list[type[Any]]:
        """Transform classes (subclasses of :class:`cdcflow.contract.Transform`).

        A transform implements ``apply(event)`` (the new event, or None to drop it) and, when it
        adds, renames, drops or retypes columns, ``transform_schema(schema, source)``: the
        :class:`~cdcflow.events.RowSchema` of what ``apply`` returns for events of ``schema``
        from ``source``'s table, built with ``schema.with_columns(...)``. It is called once per
        (schema, keyspace, table) and cached, so it must depend on nothing but those and the
        config; a column only some events get is optional. The runtime puts that schema on every
        event ``apply`` returns, so converters (Avro, Connect JSON) and the parquet sink describe
        exactly the event's fields; an event carrying a column its schema lacks is refused with a
        :class:`~cdcflow.errors.TransformError` (dead letters) instead of the column being
        dropped silently. Example: a transform adding ``amount_bucket``::

            def transform_schema(self, schema, source):
                return schema.with_columns(value_columns=(*schema.value_columns, Column("amount_bucket", "text")))
        """
        raise NotImplementedError

    @hookspec
    def cdcflow_sink_types(self) -> list[type[Any]]:
        """Sink classes (subclasses of :class:`cdcflow.contract.Sink`). A sink type also
        serves as a dead-letter destination (``errors.dead_letter``)."""
        raise NotImplementedError

    @hookspec
    def cdcflow_converter_types(self) -> list[type[Any]]:
        """Converter classes (subclasses of :class:`cdcflow.contract.Converter`) that sinks
        name in their ``converter`` field."""
        raise NotImplementedError

    # --- state -------------------------------------------------------------------------------

    @hookspec
    def cdcflow_checkpoint_store_types(self) -> list[type[Any]]:
        """Checkpoint store classes (subclasses of :class:`cdcflow.contract.CheckpointStore`)."""
        raise NotImplementedError

    # --- installation ------------------------------------------------------------------------

    @hookspec
    def cdcflow_required_extras(self) -> list[Extra]:
        """The optional dependency groups (:class:`cdcflow.extras.Extra`) every type this plugin
        contributes needs, e.g. ``[cdcflow.extras.CASSANDRA]``.

        The plugin's module must import without them (import their modules inside the functions
        that use them). When one is not installed, ``cdcflow plugins list`` shows the plugin's
        types as unavailable and a pipeline naming one fails at ``validate`` and ``run`` with a
        :class:`~cdcflow.errors.MissingExtraError` naming the extra and the pip command. A
        third-party plugin names its own distribution's extras: ``Extra("s3", ("boto3",), "my-plugin")``.
        """
        raise NotImplementedError

    # --- command line ------------------------------------------------------------------------

    @hookspec
    def cdcflow_cli_commands(self, commands: CommandLine) -> None:
        """Add subcommands to ``cdcflow`` (``cdcflow commitlog dump``, ``cdcflow bootstrap``...).

        Called once per ``cdcflow`` invocation, after every plugin loaded and before the arguments
        are parsed. Add each command with ``commands.add_command(name, help_text)`` and give its
        parser a handler, ``set_defaults(handler=fn)`` where ``fn(args) -> int`` is the exit code.
        A command's own work happens in its handler; this hook must not do I/O.
        """
        raise NotImplementedError
