"""The JSON schema of pipeline files, with every installed plugin's config model, for editors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdcflow.config import PipelineConfig

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["pipeline_json_schema"]

_SECTIONS = {"source": "source", "sink": "sink", "checkpoint": "checkpoint"}


def _plugin_choices(registry: PluginRegistry, kind: str, definitions: dict[str, Any]) -> dict[str, Any]:
    choices = []
    for registered in registry.registered(kind):
        schema = registered.cls.config_model.model_json_schema(ref_template="#/$defs/{model}")
        definitions.update(schema.pop("$defs", {}))
        schema["properties"]["type"] = {"const": registered.type_name, "description": f"from {registered.provider}"}
        schema.setdefault("required", [])
        if "type" not in schema["required"]:
            schema["required"].append("type")
        schema["title"] = f"{kind} {registered.type_name}"
        choices.append(schema)
    return {"oneOf": choices} if choices else {"type": "object"}


def pipeline_json_schema(registry: PluginRegistry) -> dict[str, Any]:
    schema = PipelineConfig.model_json_schema(ref_template="#/$defs/{model}")
    definitions: dict[str, Any] = schema.setdefault("$defs", {})
    properties = schema["properties"]
    for field, kind in _SECTIONS.items():
        properties[field] = _plugin_choices(registry, kind, definitions)
    properties["transforms"] = {"type": "array", "items": _plugin_choices(registry, "transform", definitions)}
    errors = definitions.get("ErrorsConfig")
    if errors is not None:
        errors["properties"]["dead_letter"] = {
            "anyOf": [
                _plugin_choices(registry, "sink", definitions),
                {"const": "none", "description": "drop what tolerance all sets aside (counted, kept nowhere)"},
                {"type": "null"},
            ],
            "description": errors["properties"]["dead_letter"].get("description", ""),
        }
    group = definitions.get("GroupConfig")
    if group is not None:  # a pipeline file's group is named after the pipeline unless it says
        group["required"] = [r for r in group.get("required", []) if r != "id"]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "cdcflow pipeline"
    return schema
