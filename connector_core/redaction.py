"""Secret values are never printed: the one place that knows which values are secret and hides them.

A value is secret when it came from a secret file (``${file:PATH}``, ``${file:PATH:KEY}``) or
when it sits under a field named like one (:func:`is_secret_field`: ``password``, ``secret``,
``token``, ``sasl.*``...), whatever its source. Loading a pipeline file remembers every such
value here, for the whole process, because a secret can reach any error message, log line or
``validate`` output, far from the config that brought it in (a driver's error quoting its
connection settings). Three places then hide them, all through :func:`redact`:

* every cdcflow error's text (:class:`cdcflow.errors.CdcflowError.__str__`), so an error shows
  ``***`` wherever it is printed: the CLI, a log line, a REST answer;
* a config problem's ``found`` (:func:`contains_secret`): the bad value is not quoted at all;
* every log line (:class:`RedactingFormatter`, which ``cdcflow``'s logging setup installs).

Free text is searched for secrets of at least :data:`MIN_SEARCHED_LENGTH` characters, each as a
whole word (not inside a longer word): a short one (``"1"``) would blank out line numbers and
counts everywhere, and the well-known default password ``cassandra`` the plugin name
``cassandra_commitlog``. A short value is still hidden where it is the value of its own field.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MASK",
    "MIN_SEARCHED_LENGTH",
    "RedactingFormatter",
    "contains_secret",
    "is_secret_field",
    "redact",
    "remember_secret",
    "remember_secret_fields",
]

MASK = "***"
MIN_SEARCHED_LENGTH = 4

# Words of a field name that make its value a secret. A name's words are split at '.', '_' and
# '-' (and camelCase), so `key_columns` and `keyspace` are not secrets and `ssl.key.password` is.
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pwd", "secret", "secrets", "token", "tokens", "credential", "credentials", "jaas"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("user", "info")})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


class _RememberedSecrets:
    """The secrets of this process. Read without the lock: each attribute is replaced whole."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exact: frozenset[str] = frozenset()
        self.searched: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None  # every searched secret, as a whole word


def _as_a_word(secret: str) -> str:
    before = r"(?<!\w)" if re.match(r"\w", secret[0]) else ""
    after = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return before + re.escape(secret) + after


_SECRETS = _RememberedSecrets()


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(name)]


def _named_secret(name: str) -> bool:
    words = _words(name)
    if words[:1] == ["sasl"] and not name.startswith("sasl_") and words[1:] not in (["mechanism"], ["mechanisms"]):
        return True  # librdkafka's sasl.* passthrough (sasl.username too: it names the account)
    return bool(_SECRET_WORDS.intersection(words) or _SECRET_PAIRS.intersection(itertools.pairwise(words)))


def is_secret_field(path: Iterable[str | int]) -> bool:
    """Whether a value at this field path is a secret: its field is named like one
    (``sink.kafka.sasl_password``, ``rest.auth.tokens.ci.token``, a librdkafka ``sasl.*`` key), or
    it is an entry of a mapping so named (``tokens: {ci: ...}``: written in the wrong shape, an
    entry is still a token; its ``role`` beside ``token`` is not)."""
    parts = list(path)
    while parts and isinstance(parts[-1], int):
        parts.pop()  # an item of a list is what its list is
    if not parts or not isinstance(parts[-1], str):
        return False
    if _named_secret(parts[-1]):
        return True
    return len(parts) >= 2 and isinstance(parts[-2], str) and _named_secret(parts[-2])


def remember_secret(value: str) -> None:
    """Hide ``value`` from now on, in every error, log line and config problem of this process."""
    if not value or value in _SECRETS.exact:
        return
    with _SECRETS.lock:
        _SECRETS.exact = _SECRETS.exact | {value}
        if len(value) >= MIN_SEARCHED_LENGTH:
            # As written, and as it reads inside a JSON log line; the longest first, so that a
            # secret that holds another is hidden whole.
            _SECRETS.searched = _SECRETS.searched | {value, json.dumps(value)[1:-1]}
            ordered = sorted(_SECRETS.searched, key=len, reverse=True)
            _SECRETS.pattern = re.compile("|".join(_as_a_word(secret) for secret in ordered))


def remember_secret_fields(data: Any, path: tuple[str | int, ...] = ()) -> None:
    """Remember the value of every field of ``data`` (a loaded pipeline file) named like a secret."""
    if isinstance(data, dict):
        for key, value in data.items():
            remember_secret_fields(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            remember_secret_fields(value, (*path, index))
    elif data is not None and not isinstance(data, bool) and is_secret_field(path):
        remember_secret(str(data))


def contains_secret(value: Any) -> bool:
    """Whether a config value is, or holds, a remembered secret (then it must not be quoted)."""
    if isinstance(value, str) and value in _SECRETS.exact:
        return True
    if isinstance(value, dict | list | tuple):
        return any(contains_secret(item) for item in (value.values() if isinstance(value, dict) else value))
    pattern = _SECRETS.pattern
    return pattern is not None and pattern.search(value if isinstance(value, str) else repr(value)) is not None


def redact(text: str) -> str:
    """``text`` with every remembered secret replaced by ``***``."""
    pattern = _SECRETS.pattern
    return text if pattern is None else pattern.sub(MASK, text)


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines with the secrets hidden: the message, its arguments, the
    exception and any extra field alike, since it works on the finished line."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))
