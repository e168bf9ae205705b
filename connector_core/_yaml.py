"""YAML loading that remembers the line of every field, and ``${ENV}`` and ``${file:PATH}`` interpolation.

Line numbers let every config error point at the spot in the file, like a linter does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cdcflow._secret_files import SecretUnreadableError, read_secret
from cdcflow.errors import (
    ConfigFieldError,
    ConfigFileError,
    MalformedEnvironmentReferenceError,
    MissingEnvironmentVariableError,
    MissingSecretKeyError,
    SecretFileError,
)
from cdcflow.redaction import remember_secret

FieldPath = tuple[str | int, ...]

# What a `$` can start in a string value: an escaped `$$`, a secret file's value (a path without
# ':', then optionally a key), an environment reference in one of the two forms, or something that
# looks like a reference and is not (a `${` that is not one of the forms, or a shell-style `$NAME`).
# A `$` before anything else stays as it is (`$1` in a route replacement, `$` ending a regex).
_DOLLAR = re.compile(
    r"\$\$"
    r"|\$\{file:(?P<secret_file>[^}:]+)(?::(?P<key>[^}]+))?\}"
    r"|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}"
    r"|(?P<malformed>\$\{[^}]*\}?|\$[A-Za-z_][A-Za-z0-9_]*)"
)


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
    problems: dict[FieldPath, ConfigFieldError] | None = None,
) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of ``data`` from the environment,
    and ``${file:PATH}`` and ``${file:PATH:KEY}`` from secret files (a relative PATH from the folder
    of ``file``); ``$$`` is a literal ``$``.

    What looks like a reference and is none of these forms is an error naming the field and line,
    never text used as it is. A substituted value stays text: the field's type converts it
    (``workers: ${WORKERS}`` becomes an integer, a password ``007`` stays ``007``). A value read
    from a secret file, and the whole text of its field, is remembered as a secret
    (:mod:`cdcflow.redaction`): no message shows it.

    With a ``problems`` dict, each field's bad or unset reference goes in it under the field's path
    and the field keeps its text, so that the rest of the file can still be checked; without one,
    the first is raised.
    """
    env = os.environ if environ is None else environ
    if isinstance(data, dict):
        return {k: interpolate_environment(v, file, lines, env, (*path, k), problems) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate_environment(v, file, lines, env, (*path, i), problems) for i, v in enumerate(data)]
    if not isinstance(data, str) or "$" not in data:
        return data

    from_secret_files = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal from_secret_files
        if match.group("malformed") is not None:
            raise MalformedEnvironmentReferenceError(file, dotted(path), match.group(0), lines.get(path))
        if match.group("secret_file") is not None:
            from_secret_files = True
            return _secret_file_value(match.group("secret_file"), match.group("key"), file, path, lines)
        name, default = match.group("name"), match.group("default")
        if name is None:
            return "$"  # $$
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise MissingEnvironmentVariableError(file, dotted(path), name, lines.get(path))

    try:
        text = _DOLLAR.sub(substitute, data)
    except ConfigFieldError as exc:  # a reference that is malformed, unset or unreadable
        if problems is None:
            raise
        problems[path] = exc
        return data
    if from_secret_files:
        remember_secret(text)
    return text


def _secret_file_value(
    written: str, key: str | None, file: Path, path: FieldPath, lines: Mapping[FieldPath, int]
) -> str:
    secret_file = (file.parent / Path(written).expanduser()).resolve()
    try:
        value = read_secret(secret_file, key)
    except SecretUnreadableError as exc:
        if key is not None and exc.known_keys is not None:
            known = exc.known_keys
            raise MissingSecretKeyError(file, dotted(path), str(secret_file), key, known, lines.get(path)) from exc
        raise SecretFileError(file, dotted(path), exc.reason, lines.get(path)) from exc
    remember_secret(value)
    return value
