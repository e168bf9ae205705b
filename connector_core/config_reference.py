"""The configuration reference, ``docs/config-reference.md``, written from the pydantic models.

Every setting of a pipeline file is described once, where it is declared: a ``Field``'s
``description``, its type, its default and its constraints. This module turns those models (the
pipeline's own in :mod:`cdcflow.config`, the worker group's in :mod:`cdcflow.group.config`, and the
config model of every built-in plugin the registry holds) into one Markdown page, so the reference
cannot drift from the code. ``tests/unit/project/test_config_reference.py`` fails when the committed page is
not what this module writes now.

Regenerate it from the repository's root::

    python -m cdcflow.config_reference            # writes docs/config-reference.md
    python -m cdcflow.config_reference --check    # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cdcflow.config import ErrorsConfig, PipelineConfig, SparkEngineConfig, WorkerEngineConfig
from cdcflow.group.config import GroupConfig

__all__ = ["DEFAULT_OUTPUT", "github_anchor", "main", "render_config_reference"]

DEFAULT_OUTPUT = Path("docs/config-reference.md")
REGENERATE = "python -m cdcflow.config_reference"


class _RegisteredPlugin(Protocol):
    """What the reference reads of one entry of the plugin registry."""

    @property
    def kind(self) -> str: ...
    @property
    def type_name(self) -> str: ...
    @property
    def cls(self) -> type[Any]: ...
    @property
    def builtin(self) -> bool: ...


class _PluginListing(Protocol):
    def registered(self, kind: str | None = None) -> Sequence[_RegisteredPlugin]: ...


# Plugin kinds in the order the page lists them, with their part's heading.
_KIND_HEADINGS: Mapping[str, str] = {
    "source": "Sources",
    "transform": "Transforms",
    "sink": "Sinks",
    "converter": "Converters",
    "checkpoint": "Checkpoint stores",
}

# The pipeline's own sections, in file order: heading, model.
_PIPELINE_SECTIONS: Sequence[tuple[str, type[BaseModel]]] = (
    ("The pipeline file", PipelineConfig),
    ("`errors`", ErrorsConfig),
    ("`engine` (type worker)", WorkerEngineConfig),
    ("`engine` (type spark)", SparkEngineConfig),
    ("`engine.group`", GroupConfig),
)

# Fields the models leave untyped (a plugin's section, checked against that plugin's model later):
# what their type cell says instead, by (model, field).
_UNTYPED_FIELDS: Mapping[tuple[str, str], str] = {
    ("PipelineConfig", "source"): "a [source](#sources) section",
    ("PipelineConfig", "transforms"): "list of [transform](#transforms) sections",
    ("PipelineConfig", "sink"): "a [sink](#sinks) section",
    ("PipelineConfig", "checkpoint"): "a [checkpoint store](#checkpoint-stores) section \\| null",
    ("ErrorsConfig", "dead_letter"): 'a [sink](#sinks) section \\| "none" \\| null',
    ("KafkaSinkConfig", "converter"): 'a [converter](#converters) name or section: "json", "avro" or {type: ...}',
    ("KafkaSourceConfig", "converter"): 'a [converter](#converters) name or section: "json", "avro" or {type: ...}',
}

_SCALAR_NAMES: Mapping[type[Any], str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Path: "path",
    SecretStr: "secret string",
}


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation but ``-`` and ``_``
    dropped, spaces made hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@dataclass(frozen=True)
class _Section:
    heading: str
    model: type[BaseModel]
    intro: str
    fixed_type: str | None = None  # a plugin section's `type` value


def render_config_reference(registry: _PluginListing) -> str:
    """The whole page: the pipeline's sections, each built-in plugin's, then the models they nest."""
    parts: dict[str, list[_Section]] = {"pipeline": []}
    for heading, model in _PIPELINE_SECTIONS:
        parts["pipeline"].append(_Section(heading, model, _docstring(model)))
    for kind, title in _KIND_HEADINGS.items():
        parts[title] = [
            _Section(f"{kind} `{entry.type_name}`", entry.cls.config_model, _docstring(entry.cls), entry.type_name)
            for entry in registry.registered(kind)
            if entry.builtin
        ]
    named = [section for sections in parts.values() for section in sections]
    nested = [_Section(f"`{model.__name__}`", model, _docstring(model)) for model in _nested_models(named)]
    anchors = {section.model: github_anchor(section.heading) for section in [*nested, *named]}

    lines = _preamble(parts)
    for title, sections in parts.items():
        if title != "pipeline":
            lines += [f"## {title}", ""]
        for section in sections:
            lines += _render_section(section, anchors, level="###" if title != "pipeline" else "##")
    lines += ["## Nested settings", "", "Blocks the sections above share or nest, by model.", ""]
    for section in nested:
        lines += _render_section(section, anchors, level="###")
    return "\n".join(lines).rstrip("\n") + "\n"


def _preamble(parts: Mapping[str, Sequence[_Section]]) -> list[str]:
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from the pydantic models: do not edit. Regenerate with "
        f"`{REGENERATE}` from the repository's root. -->",
        "",
        "Every setting of a pipeline file, as the models that check it declare it: type, default and "
        "what it is for. Written by `python -m cdcflow.config_reference` from `cdcflow.config`, "
        "`cdcflow.group.config` and each built-in plugin's config model; "
        "`tests/unit/project/test_config_reference.py` fails when this page is stale. How pipeline files are "
        "written, interpolated and checked: [configuration.md](configuration.md).",
        "",
        "A setting marked *required* has no default. `null` is YAML's null (or leaving the setting out "
        "where the default is null).",
        "",
    ]
    for title, sections in parts.items():
        if title == "pipeline":
            lines += [f"- [{s.heading}](#{github_anchor(s.heading)})" for s in sections]
        else:
            links = ", ".join(f"[`{s.fixed_type}`](#{github_anchor(s.heading)})" for s in sections)
            lines.append(f"- [{title}](#{github_anchor(title)}): {links}")
    lines += ["- [Nested settings](#nested-settings)", ""]
    return lines


def _render_section(section: _Section, anchors: Mapping[type[BaseModel], str], level: str) -> list[str]:
    lines = [f"{level} {section.heading}", ""]
    if section.intro:
        lines += [section.intro, ""]
    lines += ["| setting | type | default | description |", "| --- | --- | --- | --- |"]
    fields = dict(section.model.model_fields)
    if section.fixed_type is not None:
        fields.pop("type", None)
        lines.append(f'| `type` | `"{section.fixed_type}"` | *required* | selects this {section.heading} |')
    for name, info in fields.items():
        key = info.alias or name
        type_cell = _UNTYPED_FIELDS.get((section.model.__name__, name)) or _type_cell(info, anchors)
        description = _cell(_markdown(info.description or ""))
        lines.append(f"| `{key}` | {type_cell} | {_default_cell(info)} | {description} |")
    lines.append("")
    return lines


def _nested_models(sections: Iterable[_Section]) -> list[type[BaseModel]]:
    """Every model a section's fields refer to that has no section of its own, in first-seen order."""
    own = {section.model for section in sections}
    found: list[type[BaseModel]] = []
    pending = [section.model for section in sections]
    while pending:
        model = pending.pop(0)
        for info in model.model_fields.values():
            for referred in _models_in(info.annotation):
                if referred not in own and referred not in found:
                    found.append(referred)
                    pending.append(referred)
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in get_args(annotation) for model in _models_in(argument)]


def _type_cell(info: FieldInfo, anchors: Mapping[type[BaseModel], str]) -> str:
    text = _type_text(info.annotation, anchors)
    constraints = _constraints(info.metadata)
    return _cell(", ".join([text, *constraints]))


def _type_text(annotation: Any, anchors: Mapping[type[BaseModel], str]) -> str:
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is Annotated:
        return _type_text(arguments[0], anchors)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_text(argument, anchors) for argument in arguments)
    if origin is Literal:
        return " | ".join(json.dumps(value) for value in arguments)
    if origin in (list, tuple, set, frozenset) or origin is Sequence:
        return f"list of {_type_text(arguments[0], anchors)}" if arguments else "list"
    if origin in (dict, Mapping) or annotation is dict:
        if not arguments:
            return "map"
        return f"map of {_type_text(arguments[0], anchors)} to {_type_text(arguments[1], anchors)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{anchors[annotation]})"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        return _SCALAR_NAMES.get(annotation, annotation.__name__)
    return str(annotation)


def _constraints(metadata: Sequence[Any]) -> list[str]:
    """A field's bounds in words: ``Field(ge=1, max_length=200, pattern=...)``."""
    found: list[str] = []
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            found.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Ge):
            found.append(f"≥ {item.ge}")
        elif isinstance(item, annotated_types.Lt):
            found.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.Le):
            found.append(f"≤ {item.le}")
        elif isinstance(item, annotated_types.MinLen):
            found.append(f"at least {item.min_length} long")
        elif isinstance(item, annotated_types.MaxLen):
            found.append(f"at most {item.max_length} long")
        elif isinstance(getattr(item, "pattern", None), str):
            found.append(f"matching `{item.pattern}`")
    return found


def _default_cell(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "*required*"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return _cell(_model_default(value))
    return _cell(f"`{_json(value)}`")


def _model_default(value: BaseModel) -> str:
    """A nested model's default: ``its defaults``, or the fields where it differs from them."""
    model = type(value)
    own = {name: info for name, info in model.model_fields.items() if info.is_required() is False}
    changed = {
        name: getattr(value, name)
        for name, info in own.items()
        if getattr(value, name) != info.get_default(call_default_factory=True)
    }
    if not changed:
        return "its defaults"
    return "`" + "{" + ", ".join(f"{name}: {_json(field)}" for name, field in changed.items()) + "}`"


def _json(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, SecretStr):
        return '"**********"'
    return json.dumps(value, ensure_ascii=False, default=str)


def _docstring(cls: type[Any]) -> str:
    """The class's own docstring (not an inherited one), first paragraph, as Markdown."""
    own = cls.__dict__.get("__doc__")
    if not own:
        return ""
    first = inspect.cleandoc(own).split("\n\n")[0]
    return _markdown(" ".join(first.split()))


def _markdown(text: str) -> str:
    """Prose as one line of Markdown: reStructuredText's ````literal```` as Markdown's `literal`, and
    outside literals ``<``, ``>`` and ``*`` escaped (``<cluster>`` is not an HTML tag, nor ``[*]``
    the start of emphasis)."""
    pieces = " ".join(text.replace("``", "`").split()).split("`")
    # Even pieces are prose, odd ones are inside backticks (an unpaired backtick leaves the rest as prose).
    prose = range(0, len(pieces), 2) if len(pieces) % 2 else range(len(pieces))
    for index in prose:
        pieces[index] = re.sub(r"([<>*])", r"\\\1", pieces[index])
    return "`".join(pieces)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\\\\|", "\\|")


def _registry() -> _PluginListing:
    from cdcflow.plugins import PluginRegistry

    registry: _PluginListing = PluginRegistry.from_entry_points()
    return registry


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdcflow.config_reference", description=__doc__.split("\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=DEFAULT_OUTPUT, help="default: %(default)s")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render_config_reference(_registry())
    output: Path = args.output
    if args.check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            print(f"{output} is stale: run `{REGENERATE}` from the repository's root", file=sys.stderr)
            return 1
        return 0
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
