"""YAML loading that remembers the line of every field, and ``${ENV}`` interpolation.

Line numbers let every config error point at the spot in the file, like a linter does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cdcflow.errors import ConfigFileError, MissingEnvironmentVariableError

FieldPath = tuple[str | int, ...]

_INTEGER = re.compile(r"[-+]?[0-9]+")
_DECIMAL = re.compile(r"[-+]?[0-9]*\.[0-9]+")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def dotted(path: FieldPath) -> str:
    """``("transforms", 0, "regex")`` -> ``transforms[0].regex``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_yaml_with_lines(file: Path) -> tuple[Any, dict[FieldPath, int]]:
    """The document's data and the 1-based line where each field path starts."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(file, f"cannot read the file: {exc.strerror or exc}") from exc
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        lines: dict[FieldPath, int] = {}
        data = _to_python(loader, root, (), lines, file) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        raise ConfigFileError(file, f"not valid YAML: {exc.problem}", line) from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError(file, f"not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    return data, lines


def _to_python(
    loader: yaml.SafeLoader, node: yaml.Node, path: FieldPath, lines: dict[FieldPath, int], file: Path
) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in result:
                raise ConfigFileError(file, f"field {dotted((*path, key))} appears twice", key_node.start_mark.line + 1)
            result[key] = _to_python(loader, value_node, (*path, key), lines, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(loader, item, (*path, i), lines, file) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def interpolate_environment(
    data: Any,
    file: Path,
    lines: Mapping[FieldPath, int],
    environ: Mapping[str, str] | None = None,
    path: FieldPath = (),
) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of ``data``."""
    env = os.environ if environ is None else environ
    if isinstance(data, dict):
        return {k: interpolate_environment(v, file, lines, env, (*path, k)) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate_environment(v, file, lines, env, (*path, i)) for i, v in enumerate(data)]
    if not isinstance(data, str) or "${" not in data:
        return data

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise MissingEnvironmentVariableError(file, dotted(path), name, lines.get(path))

    whole = _ENV_REFERENCE.fullmatch(data)
    replaced = _ENV_REFERENCE.sub(substitute, data)
    # A value that is one reference and nothing else becomes a number or boolean when it reads as
    # one, so `workers: ${WORKERS}` stays an integer; anything else stays text (a password "no"
    # must not turn into False as YAML 1.1 would have it).
    if whole is not None:
        return _scalar_from_environment(replaced)
    return replaced


def _scalar_from_environment(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if _INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL.fullmatch(text):
        return float(text)
    return text
