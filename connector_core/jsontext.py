"""JSON text as cdcflow writes it: one place for its encoders and for the types JSON lacks.

``json.dumps`` builds a new encoder on every call, which costs more than encoding a small
document; the converters, the spark engine's rows and event sources encode one or more documents
per record, so these encoders are built once (CPython's C encoder when it is there) and give the
same text ``json.dumps`` would with the same settings.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from decimal import Decimal
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any

from cdcflow.errors import DecimalTooLongError

__all__ = ["canonical_json", "compact_json", "compiled_json_encoder", "json_default", "json_envelope", "with_text_keys"]


def json_default(value: Any) -> Any:
    """How cdcflow writes values JSON has no type for: bytes as base64, sets and tuples as lists,
    decimals as their exact plain text (``"-12345.678901234567890"``, never a float or ``1E+3``)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, Decimal):
        return plain_decimal_text(value)
    return str(value)


MAX_PLAIN_DECIMAL_CHARS = 100_000
"""The longest plain text of a decimal cdcflow writes (digits, zeros, sign and point): far beyond
any column's precision in practice, far below what would exhaust a worker's memory."""


def plain_decimal_text(value: Decimal) -> str:
    """A decimal as plain text, never in exponent notation (Java's ``toPlainString``): ``1E+3`` is
    ``1000``. :class:`~cdcflow.errors.DecimalTooLongError` when that text would be longer than
    :data:`MAX_PLAIN_DECIMAL_CHARS`."""
    _, digits, exponent = value.as_tuple()
    # NaN and Infinity have a string exponent and no digits to spell out; otherwise the plain text
    # is at most the digits, the zeros the exponent adds, a sign, a point and a leading zero.
    if isinstance(exponent, int) and len(digits) + abs(exponent) + 3 > MAX_PLAIN_DECIMAL_CHARS:
        raise DecimalTooLongError(
            f"decimal with {len(digits)} digits and exponent {exponent} has no plain text within "
            f"{MAX_PLAIN_DECIMAL_CHARS:,} characters"
        )
    return format(value, "f")


def with_text_keys(value: Any) -> Any:
    """``value`` with every mapping key, at any depth, as the text JSON writes for it (``1`` as
    ``"1"``, None as ``"null"``), and keys JSON cannot take (a decimal, a UUID, bytes, a frozen
    collection: what a CQL map can be keyed by) as :func:`json_default` writes them: JSON text
    for any map, and keys of one type, so that they sort."""
    if isinstance(value, dict):
        return {_text_key(key): with_text_keys(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [with_text_keys(item) for item in value]
    return value


def _text_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, int | float):  # bool is an int
        return json.dumps(key)
    text = json_default(key)
    return text if isinstance(text, str) else compact_json(with_text_keys(text))


def _encoder(sort_keys: bool, ensure_ascii: bool, default: Callable[[Any], Any] | None) -> Callable[[Any], str]:
    settings = json.JSONEncoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=default, separators=(",", ":"))
    if c_make_encoder is None:
        return settings.encode
    quote = encode_basestring_ascii if ensure_ascii else encode_basestring
    # No circular-reference markers: records are trees, and a cycle still ends in RecursionError.
    chunks = c_make_encoder(None, settings.default, quote, None, ":", ",", sort_keys, False, True)
    return lambda value: "".join(chunks(value, 0))


canonical_json: Callable[[Any], str] = _encoder(sort_keys=True, ensure_ascii=True, default=None)
"""Sorted keys, ASCII, no spaces: equal values give equal text (offsets, positions)."""


def _compact_json_encoders() -> tuple[Callable[[Any], str], Callable[[Any, str | None], bytes], Any]:
    from cdcflow.native import native_module

    native = native_module()
    if native is not None:
        # The compiled core writes the same text (tests/unit/connector_core/test_compiled_encoders.py).
        encoder = native.JsonEncoder(json_default)
        return encoder.dumps, encoder.envelope, encoder
    dumps = _encoder(sort_keys=False, ensure_ascii=False, default=json_default)

    def envelope(payload: Any, schema: str | None) -> bytes:
        body = dumps(payload)
        return (body if schema is None else f'{{"schema":{schema},"payload":{body}}}').encode()

    return dumps, envelope, None


compact_json: Callable[[Any], str]
"""Keys in their order, UTF-8 text, bytes as base64: record payloads."""
json_envelope: Callable[[Any, str | None], bytes]
"""``{"schema":<schema text>,"payload":<compact_json(payload)>}`` as UTF-8 (Kafka Connect JSON),
or the payload alone when the schema is None."""
compiled_json_encoder: Any
"""The compiled core's ``JsonEncoder`` behind ``compact_json`` (None without the compiled core):
what compact batches write the values the core does not hold with."""
compact_json, json_envelope, compiled_json_encoder = _compact_json_encoders()
