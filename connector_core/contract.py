"""The plugin contract: what a source, sink, transform, converter and checkpoint store promise.

Both engines (the worker and Spark) drive plugins only through these classes, so a plugin that
honours the docstrings below runs under either, with at-least-once delivery. The contract is
small, like Kafka Connect's ``SourceTask``/``SinkTask``; what only some plugins can do (compact
event batches, watermarks, finite partitions, native Spark streams...) is an optional capability
protocol in :mod:`cdcflow.capabilities`, which the engines look for with ``isinstance``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from cdcflow.errors import TransformError
from cdcflow.events import ChangeEvent, Record, RowSchema, SchemaChangeEvent, SourceInfo
from cdcflow.jsontext import canonical_json
from cdcflow.prerequisites import CheckResult, PrerequisiteScope

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "CheckpointStoreConfig",
    "Converter",
    "DataLossHeadroom",
    "FencingCheckpointStore",
    "NestedPluginSection",
    "Offset",
    "Partition",
    "PluginConfig",
    "PluginContext",
    "PluginFactory",
    "Rejected",
    "Sink",
    "Source",
    "Succession",
    "Transform",
    "offset_key",
]

Offset = dict[str, Any]
"""A position in a partition: a small JSON-serialisable dict. Compared with :func:`offset_key`."""


def offset_key(offset: Offset | None) -> str:
    """The canonical text of an offset: equal offsets give equal keys, whatever their key order."""
    return canonical_json(offset)


@dataclass(frozen=True)
class NestedPluginSection:
    """A plugin section inside another plugin's section (a sink's converter), which the outer
    plugin builds through ``context.factory``.

    ``field_name`` is the outer section's field it stands for; ``section`` is the nested plugin's
    config as the outer plugin will build it. ``written_at`` maps a field of ``section`` that the
    file holds elsewhere to where, relative to the outer section (``converter: avro`` is
    ``{type: avro}`` written at ``("converter",)``; ``schema_registry_url`` written beside
    ``converter``), so that a problem there names the place the user wrote it.
    """

    kind: str
    field_name: str
    section: Mapping[str, Any]
    written_at: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class PluginConfig(BaseModel):
    """Base of every plugin's config model: unknown fields are errors, ``type`` selects the plugin."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str

    @classmethod
    def nested_plugin_sections(cls, section: Mapping[str, Any]) -> list[NestedPluginSection]:
        """The plugin sections this plugin builds from its own section (a sink's converter), read
        from ``section`` as the file holds it (not yet validated: skip what is not a section), so
        that loading the file checks them with everything else and reports their mistakes in the
        same run. Default: none."""
        return []


ConfigT = TypeVar("ConfigT", bound=PluginConfig)


class PluginFactory(Protocol):
    """What a plugin needs to build the plugins it is made of (a sink's converter, a dead-letter sink)."""

    def create_converter(self, config: Mapping[str, Any] | str, context: PluginContext) -> Converter[Any]: ...

    def create_sink(self, config: Mapping[str, Any], context: PluginContext) -> Sink[Any]: ...


@dataclass(frozen=True)
class PluginContext:
    """What the runtime tells a plugin instance about where it runs.

    Relative paths in a config resolve against ``base_dir``, the pipeline file's folder.
    ``field_path`` is where the plugin's config sits in the file, for error messages.

    ``committed_offsets`` (given to the source) returns the pipeline's committed offsets by
    partition id, across every process running the pipeline: the worker engine reads its
    checkpoint store anew on each call; the spark engine gives the offsets the micro-batch being
    planned starts from (those of the last completed batch). A source whose partitions wait on one
    another (a snapshot before its stream) decides from it in ``latest_offset``, returning
    ``start`` while a partition must wait. None where the engine gives none; a call may be slow
    (a store read), so callers throttle it.
    """

    pipeline: str
    pipeline_file: Path
    factory: PluginFactory | None = None
    worker_id: str = "0"
    field_path: str = ""
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("cdcflow"))
    committed_offsets: Callable[[], Mapping[str, Offset]] | None = None

    @property
    def base_dir(self) -> Path:
        return self.pipeline_file.parent


@dataclass(frozen=True)
class Succession:
    """The partitions a partition replaces (a new CDC generation's stream group, a tablet stream
    set after a split or merge, a region after a merge), and the event time (µs) from which it
    holds what they held: a key's changes before ``from_us`` are in ``predecessors``, after it here.

    Both engines read such a partition nowhere past its start until every predecessor is complete
    up to ``from_us`` at its *committed* offset, whichever process owns it (:mod:`cdcflow.succession`),
    so a key's changes keep their order downstream on every engine.
    """

    predecessors: tuple[str, ...]
    from_us: int


@dataclass(frozen=True)
class Partition:
    """A unit of parallelism and of checkpointing.

    ``id`` is stable across restarts and processes: checkpoints are stored under it and worker
    processes split partitions by it. ``info`` is whatever the source needs to read it.
    ``succeeds`` names the partitions it replaces, when it does (see :class:`Succession`).
    """

    id: str
    info: Mapping[str, Any] = field(default_factory=dict)
    succeeds: Succession | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A partition's committed offset, with the watermark it implies, when it was committed, and
    whether the partition had nothing more to give then (:class:`~cdcflow.capabilities.ReportsCaughtUp`)."""

    offset: Offset
    watermark_us: int | None
    committed_at_us: int
    caught_up: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "watermark_us": self.watermark_us,
            "committed_at_us": self.committed_at_us,
            "caught_up": self.caught_up,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        return cls(
            offset=dict(data["offset"]),
            watermark_us=data.get("watermark_us"),
            committed_at_us=int(data.get("committed_at_us", 0)),
            caught_up=bool(data.get("caught_up", False)),
        )

    def durable_until_us(self) -> int:
        """Up to when the partition was durable downstream at this commit: the commit itself when
        it was caught up, else its watermark (or the commit, for a source without watermarks)."""
        if self.caught_up or self.watermark_us is None:
            return self.committed_at_us
        return min(self.watermark_us, self.committed_at_us)

    def lag_at_commit_s(self) -> float:
        """How far behind the partition was when it committed (0: caught up)."""
        return (self.committed_at_us - self.durable_until_us()) / 1e6


@dataclass(frozen=True)
class DataLossHeadroom:
    """How long, at the current pace, until changes of a partition that are not yet durable
    downstream may be lost for good (``seconds``; ``inf`` when nothing in sight limits it), and
    what would lose them (``reason``: ``cdc_raw_full``, ``log_ttl``, ``gc_safepoint``...). The
    ``cdcflow_data_loss_headroom_seconds`` gauge (see :class:`~cdcflow.capabilities.ReportsDataLossHeadroom`)."""

    seconds: float
    reason: str
    detail: str = ""  # what the figure comes from, for the WARN log ("cdc_raw holds 900 of 1024 MiB...")


@dataclass(frozen=True)
class Rejected:
    """A record a transform or sink refused for good, on its way to the dead-letter destination."""

    record: Record
    error: BaseException
    stage: str  # "transform:<name>", "sink", "convert", ...


class _Plugin(ABC, Generic[ConfigT]):
    type_name: ClassVar[str]
    config_model: ClassVar[type[PluginConfig]]

    def __init__(self, config: ConfigT, context: PluginContext) -> None:
        self.config = config
        self.context = context

    def open(self) -> None:
        """Connect to external systems. Called once, before any other method but ``close``."""

    def close(self) -> None:
        """Release connections. Called once, also after a failure; must not raise."""

    def check_reachable(self, timeout_s: float) -> None:
        """Called once at start, before ``open``: return once the plugin's system answered, or raise
        :class:`~cdcflow.errors.StartupCheckError` naming the setting and the address, within about
        ``timeout_s`` (``engine.startup_timeout_s``). A refusal no wait will cure (credentials,
        certificates) may fail at once. Plugins whose ``open`` talks to their system anyway, or
        that have none, keep this default: ``open`` failing transiently past the same bound is
        reported as a :class:`~cdcflow.errors.StartupCheckError` too."""

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        """What this plugin needs of its live systems, checked (:mod:`cdcflow.prerequisites`): CDC
        on for each table, a compacted offsets topic, a supported server version.

        ``cdcflow doctor`` calls it with ``scope.thorough`` on a plugin it never opened: connect on
        your own, within about ``scope.timeout_s``, and leave nothing behind (no topic, table or
        file created). ``cdcflow run`` calls it right after ``open`` with ``thorough`` false: only
        the checks a query or two on the open connections answer; a ``fail`` among them stops the
        start (:class:`~cdcflow.errors.PrerequisiteFailedError`). A check the plugin cannot make
        (no permission to read a setting) is ``skip``, not ``fail``; a system that does not answer
        may raise (a :class:`~cdcflow.errors.TransientError`), which doctor reports as a failure
        and ``run`` logs. Default: no checks."""
        return ()


class Source(_Plugin[ConfigT]):
    """A change source: describes its partitions and reads bounded ranges of them.

    Guarantees a source must give:

    * ``read(p, start, end)`` is deterministic: the same range yields the same records in the same
      order, so a replay after a crash re-reads exactly what was lost.
    * ``latest_offset`` only returns offsets up to which the partition is complete: no record at or
      below it can still appear later (the partition's watermark).
    * offsets only move forward: ``latest_offset(p, start, n) >= start``.

    ``bounded`` sources (a datagen with a ``count``) end: once every partition a process owns is
    finished, the pipeline flushes, commits and returns.

    ``read_where_planned`` sources (push-based: rows exist in the process that followed the
    partition since ``start``, like a change feed) are read by the spark engine in the process
    that plans the batch, where ``latest_offset`` ran, and the records travel with the task.

    Optional capabilities (:mod:`cdcflow.capabilities`): ``read_event_batches``, ``watermark``,
    ``is_finished``, ``caught_up``, ``data_loss_headroom``, ``forget``, a native Spark stream.
    """

    bounded: bool = False
    read_where_planned: bool = False

    @abstractmethod
    def partitions(self) -> Sequence[Partition]:
        """The current partitions. May change between calls (a new CDC generation, a region split);
        a partition that disappears must first have been read to its end (or its data expired).
        One that replaces others declares them in ``Partition.succeeds``: the engines then ask
        those at their committed offsets, in any process, whether they are finished
        (:class:`~cdcflow.capabilities.FinitePartitions`) or how far their watermark is
        (:class:`~cdcflow.capabilities.ReportsWatermarks`)."""

    @abstractmethod
    def initial_offset(self, partition: Partition) -> Offset:
        """Where a partition with no checkpoint starts; ``read`` never returns records at or below it."""

    @abstractmethod
    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        """How far ``partition`` is complete now, at most about ``max_records`` records past ``start``.

        Returning ``start`` means nothing new. ``max_records`` bounds how much one read cycle holds,
        and so the duplicates a crash can cause; a source may overshoot it by one natural unit.
        """

    @abstractmethod
    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        """The records in (start, end], in the partition's order. Deterministic for the same range.

        Input the source cannot turn into a proper record (a value it cannot decode) is yielded as
        :class:`Rejected` with ``stage="source"`` and the raw bytes in its record, in its place in
        the order: the pipeline routes it to the dead-letter destination under ``errors.tolerance``
        like a record a sink refused, so nothing is dropped silently.
        """

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        """Told after these offsets are durable in the checkpoint store and downstream.

        A source that keeps its own bookmark (a Kafka consumer group, a GC safepoint) moves it
        here, never earlier.
        """


class Sink(_Plugin[ConfigT]):
    """A destination. ``write`` may buffer; ``flush`` makes everything written so far durable.

    ``engines`` names the engines the sink runs on. A sink that writes whole Spark micro-batches
    itself (``parquet``) also implements :class:`~cdcflow.capabilities.SparkBatchWriter`; any
    other sink runs under the spark engine through ``write``/``flush`` in Spark's tasks. Optional
    capabilities (:mod:`cdcflow.capabilities`): ``write_event_batch``, ``on_watermark``.
    """

    engines: ClassVar[frozenset[str]] = frozenset({"worker", "spark"})

    @abstractmethod
    def write(self, records: Sequence[Record]) -> list[Rejected]:
        """Accept records (may buffer, may block for backpressure).

        Returns the records refused for good (they go to the dead-letter destination). Raises a
        :class:`~cdcflow.errors.TransientError` when the destination cannot take them now.
        """

    @abstractmethod
    def flush(self) -> list[Rejected]:
        """Return only when every record written so far is durable downstream.

        Returns records that turned out to be refused for good. Raises
        :class:`~cdcflow.errors.SinkDeliveryError` if anything else could not be made
        durable: the pipeline then replays from its last checkpoint, so nothing is lost.
        """


class Transform(_Plugin[ConfigT]):
    """A per-record function. Raising marks the record for the dead-letter destination.

    A transform that adds, renames, drops or retypes columns states it in :meth:`transform_schema`:
    the runtime gives every event :meth:`apply` returns the schema ``transform_schema`` made from the
    input's, and refuses an event carrying a column that schema lacks (a
    :class:`~cdcflow.errors.TransformError`: the record goes to the dead letters), so converters and
    the parquet sink never drop a column silently.
    """

    @abstractmethod
    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        """The transformed event, or None to drop it. Must not mutate ``event``."""

    def transform_schema(self, schema: RowSchema, source: SourceInfo) -> RowSchema:
        """The schema of what :meth:`apply` returns for events of ``schema`` from ``source``'s table.

        Called once per (schema, keyspace, table) and cached, so the answer may depend on those
        and on the config, never on one event: a column only some events get is ``optional``.
        The default returns ``schema`` unchanged. Build the answer with
        ``schema.with_columns(key_columns=..., value_columns=...)``; events without a schema (read
        off their values by converters) skip this.
        """
        return schema

    def apply_schema_change(self, event: SchemaChangeEvent) -> SchemaChangeEvent | None:
        """Schema-change events pass unchanged unless a transform says otherwise."""
        return event

    def transform_event(self, event: ChangeEvent) -> ChangeEvent | None:
        """:meth:`apply`, with the output's schema derived by :meth:`transform_schema` and checked
        against the output's columns. The runtime calls this; transforms implement the two above."""
        result = self.apply(event)
        schema = event.schema
        if result is None or schema is None:
            return result
        same_rows = result.after is event.after and result.before is event.before and result.key is event.key
        if result.schema is schema:
            if type(self).transform_schema is not Transform.transform_schema:
                derived = self._derived_schema(schema, event.source)
                if derived is not schema:
                    result = result.with_changes(schema=derived) if result is event else result
                    result.schema = derived
            elif same_rows:
                return result  # the fast path: a transform that changes neither rows nor schema (route)
        elif result.schema is None:
            return result  # the transform dropped the schema: converters read one off the values
        return result if same_rows else self._checked(event, result)

    def _derived_schema(self, schema: RowSchema, source: SourceInfo) -> RowSchema:
        cache: dict[tuple[str, str, str], RowSchema] | None = getattr(self, "_transformed_schemas", None)
        if cache is None:
            cache = {}
            self._transformed_schemas = cache
        key = (schema.fingerprint, source.keyspace, source.table)
        derived = cache.get(key)
        if derived is None:
            derived = self.transform_schema(schema, source)
            if derived.fingerprint == schema.fingerprint:
                derived = schema
            if len(cache) >= 10_000:
                cache.clear()
            cache[key] = derived
        return derived

    def _checked(self, event: ChangeEvent, result: ChangeEvent) -> ChangeEvent:
        """``result`` if each column it carries is in its schema, or was already in ``event``
        without being in the input's (a source's own business, not this transform's)."""
        assert event.schema is not None and result.schema is not None
        before_keys, before_values = _column_names(event.schema)
        after_keys, after_values = _column_names(result.schema)
        parts = (
            ("key", result.key, event.key, after_keys, before_keys),
            ("after", result.after, event.after, after_values, before_values),
            ("before", result.before, event.before, after_values, before_values),
        )
        for part, row, earlier, allowed, allowed_earlier in parts:
            if row is None or allowed.issuperset(row):
                continue
            unknown = sorted(
                n for n in row if n not in allowed and (earlier is None or n not in earlier or n in allowed_earlier)
            )
            if unknown:
                raise TransformError(
                    f"transform {self.type_name!r} wrote {part} column(s) {unknown} of "
                    f"{event.source.keyspace}.{event.source.table} that its schema does not have; "
                    f"a transform that adds or renames columns states them in transform_schema()"
                )
        return result


class Converter(_Plugin[ConfigT]):
    """Turns records into key and value bytes for a named destination, and back."""

    @abstractmethod
    def serialize_key(self, record: Record, destination: str) -> bytes | None: ...

    @abstractmethod
    def serialize_value(self, record: Record, destination: str) -> bytes | None:
        """None is a tombstone."""

    @abstractmethod
    def deserialize(self, destination: str, data: bytes) -> dict[str, Any]:
        """A key or value payload as the converter wrote it (the key, the envelope or the bare
        row), its values as the event carried them where the converter can tell (exact numbers,
        bytes, nested values)."""


_names_of: dict[str, tuple[frozenset[str], frozenset[str]]] = {}


def _column_names(schema: RowSchema) -> tuple[frozenset[str], frozenset[str]]:
    """A schema's key and value column names, by fingerprint (checked per transformed event)."""
    names = _names_of.get(schema.fingerprint)
    if names is None:
        if len(_names_of) >= 10_000:
            _names_of.clear()
        names = _names_of[schema.fingerprint] = (
            frozenset(c.name for c in schema.key_columns),
            frozenset(c.name for c in schema.value_columns),
        )
    return names


class CheckpointStoreConfig(PluginConfig):
    """Settings every checkpoint store shares."""

    interval_ms: int = Field(default=1000, gt=0, description="how often offsets are flushed and committed")


StoreConfigT = TypeVar("StoreConfigT", bound=CheckpointStoreConfig)


class CheckpointStore(_Plugin[StoreConfigT]):
    """Durable offsets per (pipeline, partition). ``commit`` returns only once they are durable."""

    @abstractmethod
    def load(self) -> dict[str, Checkpoint]:
        """The committed checkpoints of this pipeline, by partition id."""

    def load_settled(self) -> dict[str, Checkpoint]:
        """The checkpoints whose commits have settled, without waiting for a commit still under way
        (a worker group's member mid-commit, or one that died mid-commit): possibly older than
        :meth:`load`, never newer. For periodic looks from a delivery loop (is the whole pipeline
        done, what has every process committed) that may answer "not yet" but must not wait on a
        dead member's commit, which only a rebalance this loop takes part in ends."""
        return self.load()

    @abstractmethod
    def commit(self, checkpoints: Mapping[str, Checkpoint]) -> None:
        """Durably record these partitions' checkpoints; others keep theirs. All or nothing per partition."""

    @abstractmethod
    def reset(self, partition_ids: Sequence[str] | None = None) -> None:
        """Forget the checkpoints of these partitions (all when None), so they restart from their
        initial offset."""

    @property
    def interval_ms(self) -> int:
        return self.config.interval_ms


class FencingCheckpointStore(CheckpointStore[StoreConfigT]):
    """A checkpoint store that a worker group (``engine.group``) shares between machines.

    The group splits a pipeline's partitions into buckets and gives each bucket to one worker at a
    time. A worker commits a bucket's checkpoints only while it holds the bucket's claim, and
    claiming a bucket fences whoever held it before: from then on that worker's commits for the
    bucket fail, and whatever it had begun to commit is discarded. A worker that was frozen or cut
    off from the group can therefore never move a checkpoint backwards, nor past what the bucket's
    new owner committed.
    """

    @abstractmethod
    def claim(self, buckets: Collection[int], bucket_of: Callable[[str], int]) -> dict[str, Checkpoint]:
        """Fence the previous holders of ``buckets``, then return the checkpoints committed for the
        partitions in them (``bucket_of`` maps a partition id to its bucket). Everything a previous
        holder committed before it was fenced is included."""

    @abstractmethod
    def commit_claimed(self, checkpoints: Mapping[int, Mapping[str, Checkpoint | None]]) -> frozenset[int]:
        """Commit each claimed bucket's checkpoints, all or nothing per bucket (``None`` forgets a
        partition's checkpoint). Returns the buckets another worker has claimed since: nothing was
        committed for them and their claim is gone. Raises a transient error when the store cannot
        be reached."""

    @abstractmethod
    def release(self, buckets: Collection[int]) -> None:
        """Give up the claims on ``buckets`` (after their last ``commit_claimed``, or without one when
        the bucket was lost). Must not raise."""

    @abstractmethod
    def claimed(self) -> frozenset[int]:
        """The buckets this instance holds a claim on."""
