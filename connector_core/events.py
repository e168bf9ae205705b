"""The change event: one record type from every source to every sink.

Modelled on Debezium's envelope as seed 001 ("Change Messages") specifies it: ``op``, ``key``,
``before``, ``after``, ``source`` and ``ts_ms``, plus a reference to the row schema the event was
read with. Schema changes travel as :class:`SchemaChangeEvent`, their own kind.

Values inside ``key``/``before``/``after`` are exact Python values (``None``, ``bool``, ``int`` of
any size, ``float``, ``Decimal``, ``str``, ``bytes``, ``list``, ``dict`` for maps, tuples and user
types): sources convert their native types without loss, converters decide how each is written
(``decimal_handling``) using :class:`RowSchema`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from cdcflow.jsontext import canonical_json

__all__ = [
    "ChangeEvent",
    "Column",
    "Op",
    "Record",
    "RowSchema",
    "SchemaChangeEvent",
    "SourceInfo",
    "UserType",
    "raw_bytes_event",
]

Row = dict[str, Any]


class Op(enum.StrEnum):
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a row read by a snapshot/bootstrap, not a change


@dataclass(frozen=True, slots=True)
class Column:
    """A column and its type, named in CQL's vocabulary (``int``, ``text``, ``list<int>``, ``blob``...).

    CQL types are the common vocabulary because two of the three source systems speak it and the
    third (TiKV) has only ``blob`` keys and values; converters map these names to Avro and JSON.
    """

    name: str
    type: str
    optional: bool = True


@dataclass(frozen=True, slots=True)
class UserType:
    """A CQL user-defined type that column types name (``frozen<address>``, ``list<frozen<address>>``).

    ``name`` is the type's name as column types write it, in lower case; ``fields`` its fields in
    declaration order, each ``(name, CQL type)``. Every field of a user type may be null.
    """

    name: str
    fields: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class RowSchema:
    """The schema of one table's rows, derived from the table's metadata.

    Events of the same table share one instance; ``fingerprint`` lets converters cache what they
    derive from it (an Avro schema, its registry id) without hashing per event. ``user_types``
    defines the user types the columns' types name.
    """

    namespace: str  # "<cluster>.<keyspace>.<table>"
    key_columns: tuple[Column, ...]
    value_columns: tuple[Column, ...]
    version: int = 1
    user_types: tuple[UserType, ...] = ()
    fingerprint: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        described: list[Any] = [
            self.namespace,
            self.version,
            [(c.name, c.type, c.optional) for c in self.key_columns],
            [(c.name, c.type, c.optional) for c in self.value_columns],
        ]
        if self.user_types:
            described.append([(t.name, t.fields) for t in self.user_types])
        canonical = json.dumps(described, separators=(",", ":"))
        object.__setattr__(self, "fingerprint", hashlib.sha1(canonical.encode()).hexdigest()[:16])

    def user_type(self, name: str) -> UserType | None:
        """The user type named ``name`` (lower case, as :func:`cdcflow.schemas.parse_cql_type` gives it)."""
        for user_type in self.user_types:
            if user_type.name == name:
                return user_type
        return None

    def with_columns(
        self, key_columns: tuple[Column, ...] | None = None, value_columns: tuple[Column, ...] | None = None
    ) -> RowSchema:
        """This schema with other columns (what a transform that adds, renames or drops columns returns)."""
        return RowSchema(
            self.namespace,
            self.key_columns if key_columns is None else key_columns,
            self.value_columns if value_columns is None else value_columns,
            self.version,
            self.user_types,
        )

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "namespace": self.namespace,
            "version": self.version,
            "key": [[c.name, c.type, c.optional] for c in self.key_columns],
            "value": [[c.name, c.type, c.optional] for c in self.value_columns],
        }
        if self.user_types:
            document["types"] = [[t.name, [list(f) for f in t.fields]] for t in self.user_types]
        return json.dumps(document, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RowSchema:
        data = json.loads(text)
        return cls(
            data["namespace"],
            tuple(Column(*c) for c in data["key"]),
            tuple(Column(*c) for c in data["value"]),
            data["version"],
            tuple(UserType(name, tuple((f, t) for f, t in fields)) for name, fields in data.get("types", ())),
        )


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """Where an event came from and where it stands there.

    ``partition`` is the source partition (a stream group, a node's commit-log directory, a key
    range) and ``position`` the event's place in it, so a reader can find the exact change again.
    ``ts_us`` is the change's own timestamp in microseconds (write time, commit ts).
    """

    system: str  # "scylla", "cassandra", "tikv", "kafka", "datagen", ...
    cluster: str
    keyspace: str
    table: str
    partition: str
    position: Mapping[str, Any]
    ts_us: int
    snapshot: bool = False
    version: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def position_text(self) -> str:
        """``position`` as canonical JSON text (how envelopes and Spark rows carry it)."""
        position = self.position
        return canonical_json(position if type(position) is dict else dict(position))

    def to_payload(self) -> Row:
        payload: Row = {
            "version": self.version,
            "connector": self.system,
            "name": self.cluster,
            "keyspace": self.keyspace,
            "table": self.table,
            "partition": self.partition,
            "position": self.position_text(),
            "ts_us": self.ts_us,
            "ts_ms": self.ts_us // 1000,
            "snapshot": self.snapshot,
        }
        return payload


@dataclass(slots=True)
class ChangeEvent:
    """One row change, in Debezium's envelope.

    ``topic`` is a routing override set by transforms (``route``); sinks fall back to
    :meth:`default_topic`. ``envelope`` is False once ``unwrap`` reduced the event to its row
    state; ``headers`` carry context such as dead-letter error details.
    """

    op: Op
    key: Row
    before: Row | None
    after: Row | None
    source: SourceInfo
    ts_ms: int
    schema: RowSchema | None = None
    topic: str | None = None
    envelope: bool = True
    headers: dict[str, str] | None = None

    def default_topic(self) -> str:
        s = self.source
        return f"{s.cluster}.{s.keyspace}.{s.table}"

    def destination(self) -> str:
        return self.topic if self.topic is not None else self.default_topic()

    def with_changes(self, **changes: Any) -> ChangeEvent:
        # dataclasses.replace is several times slower, and transforms call this per record.
        copy = ChangeEvent(*_change_event_fields(self))
        for name, value in changes.items():
            setattr(copy, name, value)
        return copy

    def key_payload(self) -> Row:
        return self.key

    def value_payload(self) -> Row | None:
        """The value as a sink writes it: the envelope, or the bare row state once unwrapped."""
        if not self.envelope:
            return self.after
        return {
            "op": self.op.value,
            "before": self.before,
            "after": self.after,
            "source": self.source.to_payload(),
            "ts_ms": self.ts_ms,
        }


@dataclass(slots=True)
class SchemaChangeEvent:
    """A table's schema changed (seed 001's SchemaChangeKey/Value), sent to the ``<cluster>`` topic."""

    keyspace: str
    table: str
    ddl: str
    source: SourceInfo
    ts_ms: int
    schema: RowSchema | None = None
    topic: str | None = None
    headers: dict[str, str] | None = None

    def default_topic(self) -> str:
        return self.source.cluster

    def destination(self) -> str:
        return self.topic if self.topic is not None else self.default_topic()

    def with_changes(self, **changes: Any) -> SchemaChangeEvent:
        copy = SchemaChangeEvent(*_schema_change_event_fields(self))
        for name, value in changes.items():
            setattr(copy, name, value)
        return copy

    def key_payload(self) -> Row:
        return {"keyspace": self.keyspace}

    def value_payload(self) -> Row:
        return {
            "keyspace": self.keyspace,
            "table": self.table,
            "ddl": self.ddl,
            "source": self.source.to_payload(),
            "ts_ms": self.ts_ms,
        }


Record = ChangeEvent | SchemaChangeEvent


def raw_bytes_event(
    key: bytes | None,
    value: bytes | None,
    source: SourceInfo,
    topic: str | None = None,
    headers: dict[str, str] | None = None,
) -> ChangeEvent:
    """Bytes that never became (or stopped being) a proper record, as one: ``raw_key`` and
    ``raw_value`` carry them unchanged, so a dead-letter destination keeps exactly what failed."""
    return ChangeEvent(
        op=Op.CREATE,
        key={"raw_key": key},
        before=None,
        after={"raw_value": value},
        source=source,
        ts_ms=int(time.time() * 1000),
        topic=topic,
        envelope=False,
        headers=headers,
    )


_change_event_fields = attrgetter(*(f.name for f in fields(ChangeEvent)))
_schema_change_event_fields = attrgetter(*(f.name for f in fields(SchemaChangeEvent)))
