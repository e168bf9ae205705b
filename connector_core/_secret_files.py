"""What ``${file:PATH}`` and ``${file:PATH:KEY}`` read: a whole file, or one key of a properties
or JSON file (Kubernetes mounts each secret as a file; Kafka Connect's FileConfigProvider reads
keys of a properties file).

Nothing here ever puts a file's content in a message: a problem names the file and the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["SecretUnreadableError", "read_secret"]


class SecretUnreadableError(Exception):
    """Why a secret file cannot give its value; the caller names the field it was for."""

    def __init__(self, reason: str, known_keys: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.known_keys = known_keys


def read_secret(path: Path, key: str | None) -> str:
    """The whole file without its final line break, or ``key``'s value when a key is given.

    A file named ``*.json``, or whose first character (after blanks) is ``{``, is a JSON object
    (string values as they are; numbers and booleans as JSON writes them); any other file is
    Java properties.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SecretUnreadableError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise SecretUnreadableError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from exc
    if key is None:
        return text.removesuffix("\n").removesuffix("\r")
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        values = _json_values(path, text)
    else:
        values = parse_properties(text)
    if key not in values:
        raise SecretUnreadableError(f"{path} has no key {key!r}", sorted(values))
    return values[key]


def _json_values(path: Path, text: str) -> dict[str, str]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # Its msg quotes no content; the position is enough to find the mistake.
        raise SecretUnreadableError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(document, dict):
        raise SecretUnreadableError(f"{path} holds a JSON {type(document).__name__}, not an object of keys")
    values = {}
    for name, value in document.items():
        if isinstance(value, str):
            values[name] = value
        elif isinstance(value, bool | int | float):
            values[name] = json.dumps(value)
    return values


# java.util.Properties.load(Reader), as its documentation describes the format: '#' or '!'
# comments, a key ending at the first unescaped '=', ':' or blank, '\' escapes (\t \n \r \f
# \uXXXX, any other character as itself) and a line ending in an odd number of '\' continued
# on the next line, whose leading blanks are dropped.
_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_UNICODE_ESCAPE = re.compile(r"[0-9A-Fa-f]{4}")


def parse_properties(text: str) -> dict[str, str]:
    """The key-value pairs of a Java properties file (the last of a repeated key wins)."""
    values: dict[str, str] = {}
    for line in _logical_lines(text):
        key, rest = _unescaped_until_separator(line)
        rest = rest.lstrip(_BLANKS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_BLANKS)
        values[key] = _unescape(rest)
    return values


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(_BLANKS)
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def _unescaped_until_separator(line: str) -> tuple[str, str]:
    """The key, unescaped, and what follows it (separator included)."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=:" or char in _BLANKS:
            return _unescape(line[:index]), line[index:]
        index += 1
    return _unescape(line), ""


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        escaped = text[index + 1]
        if escaped == "u" and _UNICODE_ESCAPE.fullmatch(text, index + 2, index + 6):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        index += 2
    return "".join(out)
