"""A writer of ScyllaDB's CDC, written from ScyllaDB's code: tables, generations and log rows as a
ScyllaDB cluster would write them, into any CQL cluster (a real Cassandra node in cdcflow's tests).

ScyllaDB cannot run everywhere a CDC consumer is built or tested. This module writes what its CDC
would: the description tables of vnode keyspaces (``cdc_generation_timestamps``,
``cdc_streams_descriptions_v2``, the v1 ``cdc_streams_descriptions``, the internal
``cdc_generation_descriptions_v2`` and ``cdc_local``) and of tablet keyspaces (the virtual
``cdc_timestamps`` and ``cdc_streams``, recomputed from the internal ``cdc_streams_state`` and
``cdc_streams_history`` on every change, garbage collection included), each with ScyllaDB's columns
and types and replicated as ScyllaDB replicates them (``system_distributed`` at RF 3), in keyspaces
of your choice (a Cassandra node refuses tables in its own ``system*`` keyspaces); each table's CDC
options as its ``system_schema.tables.extensions['cdc']`` bytes; CDC log tables
``<table>_scylla_cdc_log`` with quoted ``cdc$`` columns; and for each base write, the base write
itself plus the log rows ScyllaDB writes, split into records as ``cdc/split.cc`` splits them
(:mod:`.split`, rows in the table's clustering order): per record the stream from
:meth:`CdcMetadata.get_stream` (or the tablet set's), its own ``cdc$time``, pre-images, deltas and
post-images numbered by ``cdc$batch_seq_no``, ``cdc$end_of_batch``, ``cdc$ttl``, the log TTL.
Generations come from a simulated ring: :meth:`join_node` refines its vnodes and publishes a
generation operating ``2 x ring_delay + leeway`` later; writes outside the generation leeway are
refused with :class:`WriteRejectedError`, as ScyllaDB refuses them. docs/scylla.md lists each
behaviour with the upstream file it follows.

Point a consumer at it (``generations_keyspace``/``tablets_keyspace``/``schema_keyspace`` naming
the keyspaces used here) to test it against every case of the design without a ScyllaDB cluster.

List elements are logged under the keys ScyllaDB's coordinator makes (the write's time and a
sequence: ``cql3/lists.cc``), or, given the node's ``cdc_raw`` folder (``base_commit_log``), under
the keys the base table holds, read back from its commit log (:mod:`.base_list_keys`), as ScyllaDB
logs the base mutation's own cells.

Not simulated: removing list elements (Cassandra cannot address them by timeuuid), pre/post-images
of non-frozen lists, counters, LWT, Alternator.
"""

from __future__ import annotations

import copy
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cdcflow.sources.scylla_cdc.log_events import DELETED_ELEMENTS_PREFIX, DELETED_PREFIX
from cdcflow.sources.scylla_cdc.log_reader import LOG_SUFFIX
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.timeuuids import timeuuid_at
from cdcflow.sources.scylla_cdc.tokens import partition_token
from tests.standins.scylla.base_list_keys import read_list_keys
from tests.standins.scylla.errors import WriteRejectedError
from tests.standins.scylla.generations import (
    DEFAULT_GENERATION_LEEWAY_US,
    CdcMetadata,
    TopologyDescription,
    make_new_generation_description,
    split_ring,
)
from tests.standins.scylla.schema_extensions import SCHEMA_TABLES_DDL, cdc_extension_bytes, cdc_options_map
from tests.standins.scylla.split import (
    Add,
    ColumnKind,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    ImageState,
    Insert,
    Mutation,
    Operation,
    Overwrite,
    PreimageSelect,
    Remove,
    SetFields,
    TableShape,
    Update,
    build_mutation,
    load_state,
    log_records,
    preimage_select,
)
from tests.standins.scylla.tablet_streams import CLOSED, OPENED, TableStreams, new_tablet_streams

__all__ = [
    "Add",
    "DeleteColumns",
    "DeletePartition",
    "DeleteRange",
    "DeleteRow",
    "Insert",
    "Overwrite",
    "Remove",
    "ScyllaCdcWriter",
    "SetFields",
    "SimulatedKeyspaces",
    "Update",
]

Row = dict[str, Any]


@dataclass(frozen=True)
class SimulatedKeyspaces:
    """Where the simulated ``system_distributed``, ``system_distributed_everywhere``, ``system``
    and ``system_schema`` keyspaces live (a Cassandra node refuses tables in its own)."""

    distributed: str
    everywhere: str
    local: str
    schema: str

    @classmethod
    def prefixed(cls, prefix: str) -> SimulatedKeyspaces:
        return cls(
            f"{prefix}_system_distributed",
            f"{prefix}_system_distributed_everywhere",
            f"{prefix}_system",
            f"{prefix}_system_schema",
        )

    def all(self) -> tuple[str, str, str, str]:
        return (self.distributed, self.everywhere, self.local, self.schema)


@dataclass
class _Table:
    keyspace: str
    name: str
    partition_key: list[tuple[str, str]]
    clustering: list[tuple[str, str]]
    columns: dict[str, str]  # non-key column -> CQL type
    preimage: bool | Literal["full"]
    postimage: bool
    ttl_s: int
    tablets: TableStreams | None
    static: frozenset[str] = frozenset()
    table_id: uuid.UUID | None = None
    descending: frozenset[str] = frozenset()
    delta: Literal["full", "keys"] = "full"
    enabled: bool = True  # False after disable_cdc: no options, no log table, nothing logged

    @property
    def qualified(self) -> str:
        return f"{self.keyspace}.{self.name}"

    @property
    def key_names(self) -> list[str]:
        return [n for n, _ in self.partition_key + self.clustering]


def _kind(type_text: str, user_types: set[str]) -> ColumnKind:
    """atomic, set, map, list or udt (the non-frozen kinds get three log columns)."""
    text = type_text.strip().lower()
    if text.startswith("set<"):
        return "set"
    if text.startswith("map<"):
        return "map"
    if text.startswith("list<"):
        return "list"
    return "udt" if text in user_types else "atomic"


def _inner(type_text: str) -> str:
    return type_text[type_text.index("<") + 1 : type_text.rindex(">")]


def _split_args(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += char == "<"
        depth -= char == ">"
        current += char
    return [*parts, current.strip()]


def log_columns(type_text: str, kind: str) -> tuple[str, str | None]:
    """The log value column's type and the deleted-elements column's type of a base column."""
    if kind == "atomic":
        return type_text, None
    if kind == "set":
        return f"frozen<{type_text}>", f"frozen<set<{_inner(type_text)}>>"
    if kind == "map":
        key = _split_args(_inner(type_text))[0]
        return f"frozen<{type_text}>", f"frozen<set<{key}>>"
    if kind == "list":
        return f"frozen<map<timeuuid, {_inner(type_text)}>>", "frozen<set<timeuuid>>"
    return f"frozen<{type_text}>", "frozen<set<smallint>>"


class ScyllaCdcWriter:
    """Writes ScyllaDB's CDC metadata and log rows through a cassandra-driver ``session``.

    ``clock`` is the coordinator's clock (seconds); ``client_clock_offset_s`` shifts the
    timestamps clients give their writes (a client whose clock is behind writes in the past).

    The keyspaces are replicated as ScyllaDB replicates its own (see :meth:`create_metadata_tables`)
    and written at the consistency ScyllaDB writes them at: ``system_distributed`` at
    ``quorum_if_many`` (QUORUM when more than one node owns tokens, else ONE:
    ``db/system_distributed_keyspace.cc`` lines 421-423, used at 474 and 486),
    ``system_distributed_everywhere`` at ALL (its comment above ``quorum_if_many``), the node-local
    ``system`` tables at ONE.
    """

    def __init__(
        self,
        session: Any,
        keyspaces: SimulatedKeyspaces,
        *,
        shards: int = 2,
        sharding_ignore_msb: int = 12,
        ring_delay_s: float = 30.0,
        generation_leeway_us: int = DEFAULT_GENERATION_LEEWAY_US,
        layout: Literal["v2", "v1"] = "v2",
        distributed_replication_factor: int = 3,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
        client_clock_offset_s: float = 0.0,
        base_commit_log: Path | None = None,
    ) -> None:
        self.session = session
        self.keyspaces = keyspaces
        self.shards = shards
        self.sharding_ignore_msb = sharding_ignore_msb
        self.ring_delay_s = ring_delay_s
        self.layout = layout
        self.distributed_replication_factor = distributed_replication_factor
        self.rng = random.Random(seed)
        self.clock = clock
        self.client_clock_offset_s = client_clock_offset_s
        # With the node's cdc_raw folder, list cells are logged under the keys the base table gave
        # them (read back from its commit log: base_list_keys); without, as ScyllaDB makes keys.
        self.base_commit_log = base_commit_log
        self.node_id = random.Random(seed).getrandbits(48)  # UUID_gen::spoof_node, in list cells' keys
        self.metadata = CdcMetadata(generation_leeway_us=generation_leeway_us)
        self.ring: list[int] = []
        self._tables: dict[str, _Table] = {}
        self._prepared: dict[str, Any] = {}
        self._user_types: dict[str, set[str]] = {}
        self._udt_fields: dict[tuple[str, str], tuple[str, ...]] = {}
        self._generation_uuid = uuid.uuid4()
        self._local_write_us = 0  # the virtual tables' rewrites, each after the last

    # --- clocks ------------------------------------------------------------------------------------

    def coordinator_now_us(self) -> int:
        return int(self.clock() * 1_000_000)

    def client_timestamp_us(self) -> int:
        return int((self.clock() + self.client_clock_offset_s) * 1_000_000)

    # --- metadata tables -----------------------------------------------------------------------------

    def token_owners(self) -> int:
        """How many nodes of the cluster written into own tokens (``num_token_owners``)."""
        token_map = self.session.cluster.metadata.token_map
        if token_map is None:
            return len(self.session.cluster.metadata.all_hosts())
        return len(set(token_map.token_to_host_owner.values()))

    def _execute(self, scope: Literal["distributed", "everywhere", "local"], statement: Any, values: Any = ()) -> None:
        """A metadata write at the consistency ScyllaDB writes that keyspace at."""
        from cassandra import ConsistencyLevel
        from cassandra.query import BatchStatement, SimpleStatement

        if scope == "distributed":
            level = ConsistencyLevel.QUORUM if self.token_owners() > 1 else ConsistencyLevel.ONE
        else:
            level = ConsistencyLevel.ALL if scope == "everywhere" else ConsistencyLevel.ONE
        if isinstance(statement, str):
            statement = SimpleStatement(statement, consistency_level=level)
        elif isinstance(statement, BatchStatement):
            statement.consistency_level = level
        else:
            statement = statement.bind(values)
            statement.consistency_level = level
            values = None
        self.session.execute(statement, values or None)

    def create_metadata_tables(self) -> None:
        """The keyspaces and ScyllaDB's description tables, with its column names and types.

        Replicated as ScyllaDB replicates them: ``system_distributed`` by SimpleStrategy at
        ``distributed_replication_factor``, 3 unless told otherwise, on every cluster size
        (``db/system_distributed_keyspace.cc`` lines 343-346); ``system_distributed_everywhere``
        on every node (the Everywhere strategy: as many replicas as token owners); ``system`` and
        ``system_schema`` on one replica, for node-local tables (LocalStrategy, which a Cassandra
        keyspace cannot take: on one node RF 1 is the same).
        """
        distributed, everywhere, local, schema = self.keyspaces.all()
        factors = {
            distributed: self.distributed_replication_factor,
            everywhere: self.token_owners(),
            local: 1,
            schema: 1,
        }
        for keyspace, factor in factors.items():
            self.session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
                f"{{'class': 'SimpleStrategy', 'replication_factor': {factor}}}"
            )
        statements = [
            SCHEMA_TABLES_DDL.format(keyspace=schema),
            f"CREATE TABLE IF NOT EXISTS {everywhere}.cdc_generation_descriptions_v2 (id uuid, range_end bigint, "
            "ignore_msb tinyint, num_ranges int static, streams frozen<set<blob>>, PRIMARY KEY (id, range_end))",
            f"CREATE TABLE IF NOT EXISTS {local}.cdc_local (key text PRIMARY KEY, streams_timestamp timestamp, "
            "uuid uuid)",
            f"CREATE TABLE IF NOT EXISTS {local}.cdc_timestamps (keyspace_name text, table_name text, "
            "timestamp timestamp, PRIMARY KEY ((keyspace_name, table_name), timestamp)) "
            "WITH CLUSTERING ORDER BY (timestamp DESC)",
            f"CREATE TABLE IF NOT EXISTS {local}.cdc_streams (keyspace_name text, table_name text, "
            "timestamp timestamp, stream_state tinyint, stream_id blob, "
            "PRIMARY KEY ((keyspace_name, table_name), timestamp, stream_state, stream_id))",
            f"CREATE TABLE IF NOT EXISTS {local}.cdc_streams_state (table_id uuid, last_token bigint, "
            "stream_id blob, timestamp timestamp static, PRIMARY KEY (table_id, last_token))",
            f"CREATE TABLE IF NOT EXISTS {local}.cdc_streams_history (table_id uuid, timestamp timestamp, "
            "stream_state tinyint, last_token bigint, stream_id blob, "
            "PRIMARY KEY (table_id, timestamp, stream_state, last_token))",
        ]
        if self.layout == "v1":
            # Clusters from before 4.4 only; new clusters do not create the v1 tables
            # (scylladb db/system_distributed_keyspace.cc ensured_tables()).
            statements += [
                f"CREATE TABLE IF NOT EXISTS {distributed}.cdc_streams_descriptions (time timestamp PRIMARY KEY, "
                "streams frozen<set<blob>>, expired timestamp)",
                f"CREATE TABLE IF NOT EXISTS {distributed}.cdc_generation_descriptions (time timestamp "
                "PRIMARY KEY, description frozen<list<frozen<tuple<bigint, frozen<list<blob>>, tinyint>>>>, "
                "expired timestamp)",
            ]
        for statement in statements:
            self.session.execute(statement)
        if self.layout == "v2":
            self._create_v2_tables()

    def _create_v2_tables(self) -> None:
        distributed = self.keyspaces.distributed
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {distributed}.cdc_generation_timestamps (key text, time timestamp, "
            "expired timestamp, PRIMARY KEY (key, time)) WITH CLUSTERING ORDER BY (time DESC)"
        )
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {distributed}.cdc_streams_descriptions_v2 (time timestamp, "
            "range_end bigint, streams frozen<set<blob>>, PRIMARY KEY (time, range_end))"
        )

    def upgrade_to_v2(self, rewritten_row: bool = False) -> None:
        """An old (v1) cluster upgraded: the v2 tables, every known generation rewritten into
        them, and from now on new generations in v2 only; the v1 table stays, with its old
        generations. The ``rewritten`` row of ``cdc_local`` only with ``rewritten_row``: it is
        node-local, written by the node that rewrote (and by gossip-mode bootstraps before 6.0), and
        by nothing since 2026.2 (scylladb 6a7e850161 "cdc: remove legacy code"), so a node added
        later answers without it."""
        if self.layout != "v1":
            raise ValueError("only a v1 cluster is upgraded")
        self.layout = "v2"
        self._create_v2_tables()
        for generation in self.metadata.generations():
            if generation.description is not None:
                self._describe(generation.timestamp_us, generation.description)
                self.publish(generation.timestamp_us)
        if rewritten_row:
            self._execute("local", f"INSERT INTO {self.keyspaces.local}.cdc_local (key) VALUES ('rewritten')")

    def drop_keyspaces(self) -> None:
        for keyspace in self.keyspaces.all():
            self.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")

    # --- generations ---------------------------------------------------------------------------------

    def bootstrap(self, vnodes: int = 16, timestamp_us: int | None = None) -> int:
        """The first node: its ring and the first generation, operating from ``timestamp_us``
        (default now); returns the generation's timestamp (µs, whole milliseconds)."""
        self.ring = split_ring(vnodes, self.rng)
        start = timestamp_us if timestamp_us is not None else self.coordinator_now_us()
        return self._new_generation(start)

    def join_node(self, vnodes: int = 16, publish: bool = True) -> int:
        """A node joins: its tokens refine the vnodes, and the new generation starts operating
        ``2 x ring_delay + generation_leeway`` from now (no delay at all when ring_delay is 0).
        ``publish=False`` stops after the streams are written and before the timestamp is, as a
        node failing in between would (see :meth:`publish`)."""
        self.ring = sorted(set(self.ring) | set(split_ring(vnodes, self.rng)))
        return self._new_generation(self._delayed_timestamp_us(), publish)

    def _delayed_timestamp_us(self) -> int:
        """``cdc::new_generation_timestamp(add_delay=true, ring_delay)`` (scylladb
        ``cdc/generation.cc``): ``db_clock::now() + 2 * ring_delay + generation_leeway``, and just
        now when ring_delay is 0. The topology coordinator asks for the delay for every
        generation but the first (``service/topology_coordinator.cc``), as do tablet resizes."""
        now = self.coordinator_now_us()
        if self.ring_delay_s == 0:
            return now
        return now + int(2 * self.ring_delay_s * 1_000_000) + self.metadata.generation_leeway_us

    def _new_generation(self, start_us: int, publish: bool = True) -> int:
        start_us -= start_us % 1000  # generation timestamps are `timestamp` columns: milliseconds
        description = make_new_generation_description(self.ring, self.shards, self.sharding_ignore_msb, self.rng)
        self._store_internal(description)
        self.metadata.insert(start_us, description)
        self._describe(start_us, description)
        if publish:
            self.publish(start_us)
        return start_us

    def _store_internal(self, description: TopologyDescription) -> None:
        generation_id = uuid.uuid4()
        insert = self._prepare(
            f"INSERT INTO {self.keyspaces.everywhere}.cdc_generation_descriptions_v2 "
            "(id, range_end, ignore_msb, num_ranges, streams) VALUES (?, ?, ?, ?, ?)"
        )
        for entry in description.entries:
            self._execute(
                "everywhere",
                insert,
                (
                    generation_id,
                    entry.token_range_end,
                    entry.sharding_ignore_msb,
                    len(description.entries),
                    {s.raw for s in entry.streams},
                ),
            )
        self._generation_uuid = generation_id

    def _describe(self, start_us: int, description: TopologyDescription) -> None:
        """The user-facing streams, written before the timestamp that makes them readable."""
        distributed = self.keyspaces.distributed
        ms = start_us // 1000
        if self.layout == "v1":
            self._execute(
                "distributed",
                f"INSERT INTO {distributed}.cdc_streams_descriptions (time, streams) VALUES (%s, %s)",
                (ms, {s.raw for s in description.streams()}),
            )
            self._execute(
                "distributed",
                self._prepare(
                    f"INSERT INTO {distributed}.cdc_generation_descriptions (time, description) VALUES (?, ?)"
                ),
                (
                    ms,
                    [
                        (e.token_range_end, [s.raw for s in e.streams], e.sharding_ignore_msb)
                        for e in description.entries
                    ],
                ),
            )
            return
        insert = self._prepare(
            f"INSERT INTO {distributed}.cdc_streams_descriptions_v2 (time, range_end, streams) VALUES (?, ?, ?)"
        )
        for entry in description.entries:
            self._execute("distributed", insert, (ms, entry.token_range_end, {s.raw for s in entry.streams}))

    def publish(self, start_us: int) -> None:
        """The last step of a generation's publication: its timestamp in ``cdc_generation_timestamps``
        (v2); a v1 cluster's node notes its generation in ``cdc_local`` (since 2026.2 nothing
        writes ``cdc_local``: scylladb 4402b030ae)."""
        if self.layout == "v2":
            self._execute(
                "distributed",
                f"INSERT INTO {self.keyspaces.distributed}.cdc_generation_timestamps (key, time) "
                "VALUES ('timestamps', %s)",
                (start_us // 1000,),
            )
            return
        self._execute(
            "local",
            f"INSERT INTO {self.keyspaces.local}.cdc_local (key, streams_timestamp, uuid) VALUES ('cdc_local', %s, %s)",
            (start_us // 1000, self._generation_uuid),
        )

    # --- tables ----------------------------------------------------------------------------------------

    def create_table(
        self,
        keyspace: str,
        table: str,
        partition_key: Sequence[tuple[str, str]],
        clustering: Sequence[tuple[str, str]] = (),
        columns: Sequence[tuple[str, str]] = (),
        *,
        preimage: bool | Literal["full"] = False,
        postimage: bool = False,
        ttl_s: int = 86_400,
        tablets: int | None = None,
        static: Sequence[str] = (),
        descending: Sequence[str] = (),
        delta: Literal["full", "keys"] = "full",
    ) -> None:
        """A base table with CDC on: the table (``static`` names static columns, ``descending``
        clustering columns ordered DESC), its CDC options in the schema's extensions (``delta``:
        ``keys`` logs deltas of keys alone), its log table and, with ``tablets`` (a power of two),
        a tablet stream set."""
        self._user_types.setdefault(keyspace, self._known_user_types(keyspace))
        spec = _Table(
            keyspace,
            table,
            list(partition_key),
            list(clustering),
            dict(columns),
            preimage,
            postimage,
            ttl_s,
            None,
            frozenset(static),
            descending=frozenset(descending),
            delta=delta,
        )
        definitions = [
            f"{n} {t}" + (" static" if n in spec.static else "") for n, t in (*partition_key, *clustering, *columns)
        ]
        key = ", ".join(n for n, _ in partition_key)
        primary = ", ".join([f"({key})", *(n for n, _ in clustering)])
        order = ", ".join(f"{n} {'DESC' if n in spec.descending else 'ASC'}" for n, _ in clustering)
        options = f" WITH CLUSTERING ORDER BY ({order})" if spec.descending else ""
        self.session.execute(
            f"CREATE TABLE {keyspace}.{table} ({', '.join(definitions)}, PRIMARY KEY ({primary})){options}"
        )
        log_definitions = [
            '"cdc$stream_id" blob',
            '"cdc$time" timeuuid',
            '"cdc$batch_seq_no" int',
            '"cdc$operation" tinyint',
            '"cdc$ttl" bigint',
            '"cdc$end_of_batch" boolean',
            *(f"{n} {t}" for n, t in (*partition_key, *clustering)),
        ]
        # The log's columns as ``cdc/log.cc`` add_columns_to_cdc_log() makes them: static base
        # columns become regular log columns, and there is no cdc$closed_time.
        for name, type_text in columns:
            log_definitions += self._log_definitions(keyspace, name, type_text)
        self.session.execute(
            f"CREATE TABLE {keyspace}.{table}{LOG_SUFFIX} ({', '.join(log_definitions)}, "
            'PRIMARY KEY ("cdc$stream_id", "cdc$time", "cdc$batch_seq_no"))'
        )
        self._tables[spec.qualified] = spec
        self._store_cdc_options(spec)
        if self.base_commit_log is not None and any(
            _kind(type_text, self._user_types[keyspace]) == "list" for type_text in spec.columns.values()
        ):
            # Cassandra's own CDC flag: the base table's segments reach cdc_raw, where its list
            # cells' keys are read back (base_list_keys)
            self.session.execute(f"ALTER TABLE {spec.qualified} WITH cdc = true")
        if tablets is not None:
            # Stream sets are keyed by the *log* table's id (``cdc/log.cc`` lines 183-191:
            # on_before_allocate_tablet_map() acts only for is_log_schema(s) and passes s.id()), and
            # the first set starts a generation leeway in the past: db_clock::now() - leeway.
            spec.table_id = self._table_id(keyspace, table + LOG_SUFFIX)
            first = self.coordinator_now_us() - self.metadata.generation_leeway_us
            first -= first % 1000
            streams = new_tablet_streams(tablets, self.rng)
            spec.tablets = TableStreams.starting(first, streams)
            self._store_tablet_state(spec, first, streams)

    def _store_cdc_options(self, spec: _Table) -> None:
        """The table's ``cdc`` schema extension, as ``system_schema.tables`` holds it."""
        # A table whose CDC is off keeps an empty map: options::to_map() returns {} unless enabled
        # (cdc/log.cc), which reads back as every option at its default, enabled false.
        options = (
            cdc_options_map(preimage=spec.preimage, postimage=spec.postimage, delta=spec.delta, ttl_s=spec.ttl_s)
            if spec.enabled
            else {}
        )
        self._execute(
            "local",
            f"INSERT INTO {self.keyspaces.schema}.tables (keyspace_name, table_name, extensions) VALUES (%s, %s, %s)",
            (spec.keyspace, spec.name, {"cdc": cdc_extension_bytes(options)}),
        )

    def alter_cdc_options(self, table: str, *, ttl_s: int | None = None) -> None:
        """``ALTER TABLE ... WITH cdc = {..., 'ttl': ...}``: new options in the schema extension;
        log rows written from now on expire after the new TTL (rows already there keep theirs)."""
        spec = self._tables[table]
        if ttl_s is not None:
            spec.ttl_s = ttl_s
        self._store_cdc_options(spec)

    def disable_cdc(self, table: str) -> None:
        """``ALTER TABLE ... WITH cdc = {'enabled': false}``: the options become an empty map and
        the log table is dropped with everything it held (cdc/log.cc on_before_update_column_family:
        ``if (!is_cdc)`` adds make_drop_table_mutations of the log); writes are no longer logged."""
        spec = self._tables[table]
        spec.enabled = False
        self._store_cdc_options(spec)
        self.session.execute(f"DROP TABLE IF EXISTS {spec.keyspace}.{spec.name}{LOG_SUFFIX}")

    def _log_definitions(self, keyspace: str, name: str, type_text: str) -> list[str]:
        value_type, elements_type = log_columns(type_text, _kind(type_text, self._user_types[keyspace]))
        definitions = [f"{name} {value_type}", f'"{DELETED_PREFIX}{name}" boolean']
        if elements_type is not None:
            definitions.append(f'"{DELETED_ELEMENTS_PREFIX}{name}" {elements_type}')
        return definitions

    def add_column(self, table: str, name: str, type_text: str) -> None:
        """``ALTER TABLE ... ADD``: the base table and, as ScyllaDB does, its log table."""
        spec = self._tables[table]
        self.session.execute(f"ALTER TABLE {table} ADD {name} {type_text}")
        for definition in self._log_definitions(spec.keyspace, name, type_text):
            self.session.execute(f"ALTER TABLE {table}{LOG_SUFFIX} ADD {definition}")
        spec.columns[name] = type_text

    def alter_type_add_field(self, keyspace: str, type_name: str, field: str, type_text: str) -> None:
        """``ALTER TYPE ... ADD``: ScyllaDB alters every table of the keyspace whose columns use the
        type, its CDC log tables too (``cql3/statements/alter_type_statement.cc`` lines 74-93), so
        log rows written from now on carry the field; a Cassandra node does the same with the log
        tables written here. Statements prepared before bind the type's old fields: prepared anew."""
        self.session.execute(f"ALTER TYPE {keyspace}.{type_name} ADD {field} {type_text}")
        self._udt_fields.pop((keyspace, type_name), None)
        self._prepared.clear()

    def _known_user_types(self, keyspace: str) -> set[str]:
        rows = self.session.execute("SELECT type_name FROM system_schema.types WHERE keyspace_name = %s", (keyspace,))
        return {row[0] for row in rows}

    def _table_id(self, keyspace: str, table: str) -> uuid.UUID:
        rows = list(
            self.session.execute(
                "SELECT id FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (keyspace, table)
            )
        )
        return uuid.UUID(str(rows[0][0]))

    # --- tablet stream sets ------------------------------------------------------------------------------

    def _store_tablet_state(self, spec: _Table, timestamp_us: int, streams: Sequence[StreamId]) -> None:
        """A table's first stream set in ``cdc_streams_state`` (``cdc/generation.cc`` lines
        442-458), then the virtual tables' view of it."""
        local = self.keyspaces.local
        for stream in streams:
            self._execute(
                "local",
                f"INSERT INTO {local}.cdc_streams_state (table_id, last_token, stream_id, timestamp) "
                "VALUES (%s, %s, %s, %s)",
                (spec.table_id, stream.token, stream.raw, timestamp_us // 1000),
            )
        self._refresh_virtual_tables(spec)

    def _next_local_write_us(self) -> int:
        self._local_write_us = max(self._local_write_us + 2, self.coordinator_now_us())
        return self._local_write_us

    def _refresh_virtual_tables(self, spec: _Table) -> None:
        """``system.cdc_streams`` and ``system.cdc_timestamps`` as ScyllaDB's virtual tables show
        them (``db/virtual_tables.cc`` lines 1333-1470): computed from the node's stream sets each
        time, so they change with every resize and garbage collection. Each is rewritten in one
        single-partition batch (a reader sees the old view or the new one, never half), streams
        before timestamps: a reader that saw a timestamp finds its streams."""
        from cassandra.query import BatchStatement, BatchType

        assert spec.tablets is not None
        local = self.keyspaces.local
        stamp = self._next_local_write_us()
        key = (spec.keyspace, spec.name)
        streams = BatchStatement(batch_type=BatchType.UNLOGGED)
        streams.add(
            self._prepare(
                f"DELETE FROM {local}.cdc_streams USING TIMESTAMP ? WHERE keyspace_name = ? AND table_name = ?"
            ),
            (stamp - 1, *key),
        )
        insert = self._prepare(
            f"INSERT INTO {local}.cdc_streams (keyspace_name, table_name, timestamp, stream_state, stream_id) "
            "VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        for timestamp_us, state, stream in spec.tablets.virtual_rows():
            streams.add(insert, (*key, timestamp_us // 1000, state, stream.raw, stamp))
        timestamps = BatchStatement(batch_type=BatchType.UNLOGGED)
        timestamps.add(
            self._prepare(
                f"DELETE FROM {local}.cdc_timestamps USING TIMESTAMP ? WHERE keyspace_name = ? AND table_name = ?"
            ),
            (stamp - 1, *key),
        )
        insert_timestamp = self._prepare(
            f"INSERT INTO {local}.cdc_timestamps (keyspace_name, table_name, timestamp) VALUES (?, ?, ?) "
            "USING TIMESTAMP ?"
        )
        for timestamp_us in spec.tablets.timestamps():
            timestamps.add(insert_timestamp, (*key, timestamp_us // 1000, stamp))
        for batch in (streams, timestamps):
            self._execute("local", batch)

    def change_tablets(self, table: str, tablet_count: int, delay_s: float | None = None) -> int:
        """Split or merge the log table's tablets: every stream closes and ``tablet_count`` new
        ones open at ``new_generation_timestamp(true, ring_delay)`` (now + 2 x ring_delay +
        leeway), and at least 1 ms after the current set (``cdc/generation.cc`` lines 647-674,
        generate_tablet_resize_update()); ``delay_s`` overrides the delay for tests. Returns the
        timestamp of the new stream set (µs, whole milliseconds)."""
        spec = self._tables[table]
        assert spec.tablets is not None, f"{table} is not in a tablet keyspace"
        delayed = self.coordinator_now_us() + int(delay_s * 1_000_000) if delay_s is not None else None
        at = delayed if delayed is not None else self._delayed_timestamp_us()
        at -= at % 1000
        at = max(at, spec.tablets.timestamps()[-1] + 1000)
        closed, opened = spec.tablets.resize(at, new_tablet_streams(tablet_count, self.rng))
        # get_switch_streams_mutation (lines 622-645): the diff, keyed (timestamp, state, last token)
        insert = self._prepare(
            f"INSERT INTO {self.keyspaces.local}.cdc_streams_history (table_id, timestamp, stream_state, "
            "last_token, stream_id) VALUES (?, ?, ?, ?, ?)"
        )
        for state, streams in ((CLOSED, closed), (OPENED, opened)):
            for stream in streams:
                self._execute("local", insert, (spec.table_id, at // 1000, state, stream.token, stream.raw))
        self._refresh_virtual_tables(spec)
        return at

    def garbage_collect_stream_sets(self, table: str, ttl_s: int | None = None) -> list[int]:
        """What the topology coordinator's periodic ``garbage_collect_cdc_streams`` does for one
        table (``cdc/generation.cc`` lines 676-771): with the table's CDC TTL (or ``ttl_s``; a TTL
        of 0 collects nothing), the newest stream set whose successor began at or before ``now -
        ttl`` becomes the base: ``cdc_streams_state`` is replaced by it (a partition tombstone just
        before the new rows) and ``cdc_streams_history`` loses every row up to it, inclusive. The
        node then reloads its stream sets from those tables (``load_cdc_tablet_streams``, lines
        492-566), which the virtual tables show. Returns the timestamps removed."""
        spec = self._tables[table]
        assert spec.tablets is not None, f"{table} is not in a tablet keyspace"
        ttl = spec.ttl_s if ttl_s is None else ttl_s
        if ttl <= 0:
            return []
        base = spec.tablets.new_base_for_gc(self.coordinator_now_us(), ttl)
        if base is None:
            return []
        removed = [t for t in spec.tablets.timestamps() if t < base]
        local = self.keyspaces.local
        stamp = self._next_local_write_us()
        self._execute(
            "local",
            self._prepare(f"DELETE FROM {local}.cdc_streams_state USING TIMESTAMP ? WHERE table_id = ?"),
            (stamp - 1, spec.table_id),
        )
        insert = self._prepare(
            f"INSERT INTO {local}.cdc_streams_state (table_id, last_token, stream_id, timestamp) "
            "VALUES (?, ?, ?, ?) USING TIMESTAMP ?"
        )
        for stream in spec.tablets.set_at(base):
            self._execute("local", insert, (spec.table_id, stream.token, stream.raw, base // 1000, stamp))
        self._execute(
            "local",
            self._prepare(
                f"DELETE FROM {local}.cdc_streams_history USING TIMESTAMP ? WHERE table_id = ? AND timestamp <= ?"
            ),
            (stamp, spec.table_id, base // 1000),
        )
        spec.tablets = self._load_table_streams(spec)
        self._refresh_virtual_tables(spec)
        return removed

    def _load_table_streams(self, spec: _Table) -> TableStreams:
        """The table's stream sets read back from the internal tables, as a node loads them."""
        local = self.keyspaces.local
        state = list(
            self.session.execute(
                f"SELECT timestamp, stream_id FROM {local}.cdc_streams_state WHERE table_id = %s", (spec.table_id,)
            )
        )
        history = self.session.execute(
            f"SELECT timestamp, stream_state, stream_id FROM {local}.cdc_streams_history WHERE table_id = %s",
            (spec.table_id,),
        )
        base_us = _micros(state[0][0])
        return TableStreams.load(
            base_us,
            (StreamId.from_bytes(row[1]) for row in state),
            ((_micros(ts), int(kind), StreamId.from_bytes(raw)) for ts, kind, raw in history),
        )

    # --- base writes -------------------------------------------------------------------------------------

    def _prepare(self, query: str) -> Any:
        prepared = self._prepared.get(query)
        if prepared is None:
            prepared = self._prepared[query] = self.session.prepare(query)
        return prepared

    def partition_key_names(self, table: str) -> list[str]:
        return [n for n, _ in self._tables[table].partition_key]

    def value_columns(self, table: str) -> list[str]:
        """The table's non-key columns, in the order they were added."""
        return list(self._tables[table].columns)

    def logs_post_images(self, table: str) -> bool:
        return self._tables[table].postimage

    def token_of(self, table: str, partition_key: Mapping[str, Any]) -> int:
        """The Murmur3 token of a partition key, from the bytes the driver routes the key by."""
        spec = self._tables[table]
        names = [n for n, _ in spec.partition_key]
        select = self._prepare(f"SELECT {names[0]} FROM {table} WHERE " + " AND ".join(f"{n} = ?" for n in names))
        return partition_token(select.bind([partition_key[n] for n in names]).routing_key)

    def stream_for(self, table: str, timestamp_us: int, token: int) -> StreamId:
        """The one stream a log record at ``timestamp_us`` goes to (``transformer::begin_timestamp``
        in scylladb ``cdc/log.cc``): the vnode generation's stream of the token, or, with tablets,
        the stream of the newest stream set whose timestamp is at or before the record's
        (``cdc/metadata.cc`` get_tablet_stream_set()): never two streams."""
        spec = self._tables[table]
        if spec.tablets is None:
            return self.metadata.get_stream(timestamp_us, token)
        return spec.tablets.stream_of(timestamp_us, token)

    def _check_write(self, spec: _Table, timestamp_us: int) -> None:
        now = self.coordinator_now_us()
        if spec.tablets is None:
            self.metadata.check_write(timestamp_us, now)
        elif timestamp_us > now + self.metadata.generation_leeway_us:
            # ``cdc/metadata.cc`` get_tablet_stream_set(): only ``ts > now + leeway`` is refused,
            # and tablets have no refusal of past writes.
            raise WriteRejectedError(f"write timestamp {timestamp_us} is beyond the leeway past {now}")

    def write(
        self,
        table: str,
        operations: Sequence[Operation],
        *,
        timestamp_us: int | None = None,
        ttl_s: int | None = None,
        system_originated: bool = False,
    ) -> int:
        """One base write (a batch of ``operations`` on one partition; each may carry its own
        timestamp and TTL, else ``timestamp_us``/``ttl_s``), applied to the base table and logged
        as ScyllaDB logs it: one record (own ``cdc$time``, stream, sequence numbers and end of
        batch) per timestamp of a split mutation (:mod:`.split`). Returns the write's
        timestamp (µs). ``system_originated``: a delete ScyllaDB's expiration service made."""
        spec = self._tables[table]
        stamp = timestamp_us if timestamp_us is not None else self.client_timestamp_us()
        shape = self._shape(spec)
        mutation = build_mutation(shape, operations, stamp, ttl_s, node=self.node_id)
        select = preimage_select(shape, mutation)
        state = self._read_state(spec, mutation, select) if select is not None else ImageState()
        for record in log_records(shape, mutation, copy.deepcopy(state), system_originated=system_originated):
            # transformer::begin_timestamp() asks for each record's stream: a refusal fails the write.
            self._check_write(spec, record.ts)
        self._apply(spec, operations, stamp, ttl_s)
        appended = _list_cells(shape, mutation)
        if appended and self.base_commit_log is not None:
            found = read_list_keys(
                self.session, self.base_commit_log, spec.keyspace, spec.name, mutation.partition_key, appended
            )
            mutation = build_mutation(shape, operations, stamp, ttl_s, list_keys=found, node=self.node_id)
        records = log_records(shape, mutation, state, system_originated=system_originated)
        if not spec.enabled:
            return stamp
        token = self.token_of(table, mutation.partition_key)
        for record in records:
            batch, _ = self._log_batch(spec, self.stream_for(table, record.ts, token), record.ts, record.rows)
            self.session.execute(batch)
        return stamp

    def insert(self, table: str, row: Row, **options: Any) -> int:
        return self.write(table, [Insert(row)], **options)

    def update(self, table: str, key: Row, values: Row, **options: Any) -> int:
        return self.write(table, [Update(key, values)], **options)

    def delete_row(self, table: str, key: Row, **options: Any) -> int:
        return self.write(table, [DeleteRow(key)], **options)

    def delete_partition(self, table: str, partition_key: Row, **options: Any) -> int:
        return self.write(table, [DeletePartition(partition_key)], **options)

    def expire_row(self, table: str, key: Row, **options: Any) -> int:
        """A row whose per-row TTL ran out, deleted by ScyllaDB's expiration service (Alternator
        TTL; CQL per-row TTL since 2026.2): a row tombstone, or a partition tombstone on a table
        without clustering columns, logged as operation -3 / -4 (``cdc/log.hh`` service_row_delete,
        service_partition_delete; ``alternator/ttl.cc``)."""
        return self.write(table, [DeleteRow(key)], system_originated=True, **options)

    # --- what ScyllaDB reads and logs ----------------------------------------------------------------------

    def _shape(self, spec: _Table) -> TableShape:
        user_types = self._user_types[spec.keyspace]
        kinds = {name: _kind(type_text, user_types) for name, type_text in spec.columns.items()}
        return TableShape(
            tuple(n for n, _ in spec.partition_key),
            tuple(n for n, _ in spec.clustering),
            kinds,
            frozenset(spec.static),
            {name: self._field_names(spec, name) for name, kind in kinds.items() if kind == "udt"},
            spec.preimage,
            spec.postimage,
            tuple(type_text for _, type_text in spec.clustering),
            spec.descending,
            spec.delta,
        )

    def _field_names(self, spec: _Table, column: str) -> tuple[str, ...]:
        type_name = spec.columns[column]
        found = self._udt_fields.get((spec.keyspace, type_name))
        if found is None:
            rows = self.session.execute(
                "SELECT field_names FROM system_schema.types WHERE keyspace_name = %s AND type_name = %s",
                (spec.keyspace, type_name),
            )
            found = self._udt_fields[(spec.keyspace, type_name)] = tuple(next(iter(rows))[0])
        return found

    def _read_state(self, spec: _Table, mutation: Mutation, select: PreimageSelect) -> ImageState:
        """The pre-image read (``transformer::pre_image_select``): the static row and the rows the
        mutation touches (the whole partition without clustering columns), as they are now."""
        partition_key = [n for n, _ in spec.partition_key]
        where = " AND ".join(f"{n} = ?" for n in partition_key)
        values = [mutation.partition_key[n] for n in partition_key]
        static_row = None
        if select.static_columns:
            columns = ", ".join([*partition_key, *select.static_columns])
            result = self.session.execute(
                self._prepare(f"SELECT DISTINCT {columns} FROM {spec.qualified} WHERE {where}"), values
            )
            static_row = next((dict(zip(result.column_names, r, strict=True)) for r in result), None)
        rows: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        if not select.static_only:
            clustering = [n for n, _ in spec.clustering]
            keys: Sequence[tuple[Any, ...]] = select.rows if select.rows is not None else [()]
            row_where = " AND ".join([where, *(f"{n} = ?" for n in clustering)]) if select.rows else where
            statement = self._prepare(f"SELECT * FROM {spec.qualified} WHERE {row_where}")
            for key in keys:
                result = self.session.execute(statement, [*values, *key] if select.rows else values)
                for found in result:
                    row = dict(zip(result.column_names, found, strict=True))
                    rows.append((tuple(row[n] for n in clustering), row))
        return load_state(select, static_row, rows, lambda name, value: _state_value(spec, self, name, value))

    def _state_kind(self, spec: _Table, name: str) -> str:
        return _kind(spec.columns[name], self._user_types[spec.keyspace])

    # --- applying to the base table ------------------------------------------------------------------------

    def _apply(self, spec: _Table, operations: Sequence[Operation], stamp: int, ttl_s: int | None) -> None:
        """The base write: one statement, or an unlogged batch (one mutation of the partition,
        as the coordinator builds it)."""
        from cassandra.query import BatchStatement, BatchType

        statements = [self._base_statement(spec, op, stamp, ttl_s) for op in operations]
        if len(statements) == 1:
            self.session.execute(*statements[0])
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for statement, values in statements:
            batch.add(statement, values)
        self.session.execute(batch)

    def _base_statement(
        self, spec: _Table, op: Operation, write_stamp: int, write_ttl: int | None
    ) -> tuple[Any, list[Any]]:
        """The CQL statement of one operation and its values."""
        stamp = op.timestamp_us if op.timestamp_us is not None else write_stamp
        ttl_s = op.ttl_s if op.ttl_s is not None else write_ttl
        using = f"USING TIMESTAMP {stamp}" + (f" AND TTL {ttl_s}" if ttl_s else "")
        if isinstance(op, Insert):
            names = list(op.row)
            return (
                self._prepare(f"INSERT INTO {spec.qualified} ({', '.join(names)}) VALUES ({_marks(names)}) {using}"),
                [self._base_value(spec, n, op.row[n]) for n in names],
            )
        if isinstance(op, Update):
            assignments, values = [], []
            for name, change in op.values.items():
                kind = _kind(spec.columns[name], self._user_types[spec.keyspace])
                if isinstance(change, Add):
                    assignments.append(f"{name} = {name} + ?")
                    values.append(list(change.elements) if kind == "list" else change.elements)
                elif isinstance(change, Remove):
                    assignments.append(f"{name} = {name} - ?")
                    values.append(set(change.elements))
                elif isinstance(change, SetFields):
                    for field_name, field_value in change.fields.items():
                        assignments.append(f"{name}.{field_name} = ?")
                        values.append(field_value)
                else:
                    assignments.append(f"{name} = ?")
                    values.append(self._base_value(spec, name, change))
            names = [n for n in spec.key_names if n in op.key]
            where = " AND ".join(f"{n} = ?" for n in names)
            return (
                self._prepare(f"UPDATE {spec.qualified} {using} SET {', '.join(assignments)} WHERE {where}"),
                [*values, *(op.key[n] for n in names)],
            )
        if isinstance(op, DeleteColumns):
            names = [n for n in spec.key_names if n in op.key]
            where = " AND ".join(f"{n} = ?" for n in names)
            return (
                self._prepare(
                    f"DELETE {', '.join(op.columns)} FROM {spec.qualified} USING TIMESTAMP {stamp} WHERE {where}"
                ),
                [op.key[n] for n in names],
            )
        if isinstance(op, DeleteRow | DeletePartition):
            key = op.key if isinstance(op, DeleteRow) else op.partition_key
            names = list(key)
            where = " AND ".join(f"{n} = ?" for n in names)
            return (
                self._prepare(f"DELETE FROM {spec.qualified} USING TIMESTAMP {stamp} WHERE {where}"),
                [key[n] for n in names],
            )
        return self._range_statement(spec, op, stamp)

    def _base_value(self, spec: _Table, name: str, value: Any) -> Any:
        """A value as the driver binds it: user types given as a dict of fields become a tuple."""
        value = value.value if isinstance(value, Overwrite) else value
        if isinstance(value, Mapping) and name in spec.columns and self._state_kind(spec, name) == "udt":
            return tuple(value.get(f) for f in self._field_names(spec, name))
        return value

    def _range_statement(self, spec: _Table, op: DeleteRange, stamp: int) -> tuple[Any, list[Any]]:
        conditions = [f"{n} = ?" for n in op.partition_key] + [f"{n} = ?" for n in op.prefix]
        values = [*op.partition_key.values(), *op.prefix.values()]
        bounded = spec.clustering[len(op.prefix)][0] if len(op.prefix) < len(spec.clustering) else None
        for bound, sign in ((op.start, ">"), (op.end, "<")):
            if bound is not None:
                conditions.append(f"{bounded} {sign}{'=' if bound[1] else ''} ?")
                values.append(bound[0])
        return (
            self._prepare(f"DELETE FROM {spec.qualified} USING TIMESTAMP {stamp} WHERE {' AND '.join(conditions)}"),
            values,
        )

    # --- bulk loading -------------------------------------------------------------------------------------

    def insert_many(
        self,
        table: str,
        rows: Iterable[Row],
        concurrency: int = 64,
        timestamp_us: int | None = None,
        ttl_s: int | None = None,
    ) -> list[int]:
        """Inserts without images, many in flight at once (for benchmarks), stamped now or, with
        ``timestamp_us``, one microsecond apart from it; ``ttl_s``: USING TTL. Returns their
        timestamps."""
        from cassandra.concurrent import execute_concurrent

        spec = self._tables[table]
        if spec.preimage or spec.postimage:
            raise ValueError("insert_many does not read images; use insert")
        shape = self._shape(spec)
        statements: list[tuple[Any, Any]] = []
        stamps = []
        for index, row in enumerate(rows):
            stamp = self.client_timestamp_us() if timestamp_us is None else timestamp_us + index
            self._check_write(spec, stamp)
            stamps.append(stamp)
            names = list(row)
            base = self._prepare(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)}) "
                "USING TIMESTAMP ? AND TTL ?"
            )
            statements.append((base, [*(self._base_value(spec, n, row[n]) for n in names), stamp, ttl_s or 0]))
            token = self.token_of(table, row)
            for record in log_records(shape, build_mutation(shape, [Insert(row)], stamp, ttl_s), ImageState()):
                stream = self.stream_for(table, record.ts, token)
                statements.append(self._log_batch(spec, stream, record.ts, record.rows))
        execute_concurrent(self.session, statements, concurrency=concurrency)
        return stamps

    def _log_batch(self, spec: _Table, stream: StreamId, stamp: int, rows: Sequence[Row]) -> tuple[Any, Any]:
        """One write's log rows as one unlogged batch: a single mutation of the stream's partition."""
        from cassandra.query import BatchStatement, BatchType

        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        time_uuid = timeuuid_at(stamp, self.rng.getrandbits(64))
        for seq, row in enumerate(rows):
            columns = {"cdc$stream_id": stream.raw, "cdc$time": time_uuid, "cdc$batch_seq_no": seq, **row}
            if seq == len(rows) - 1:
                columns["cdc$end_of_batch"] = True
            names = sorted(columns)
            quoted = ", ".join(f'"{n}"' for n in names)
            statement = self._prepare(
                f"INSERT INTO {spec.qualified}{LOG_SUFFIX} ({quoted}) VALUES ({', '.join('?' for _ in names)}) "
                "USING TTL ? AND TIMESTAMP ?"
            )
            batch.add(statement, [columns[n] for n in names] + [spec.ttl_s, stamp])
        return batch, None


def _list_cells(shape: TableShape, mutation: Mutation) -> dict[tuple[Any, str, int], int]:
    """How many live cells each row's non-frozen lists get, by (row key, column, timestamp)."""
    counts: dict[tuple[Any, str, int], int] = {}
    rows = [(None, mutation.static), *mutation.rows.items()]
    for key, row in rows:
        for name, multi in row.multi.items():
            if shape.columns[name] != "list":
                continue
            for cell in multi.cells.values():
                if cell.live:
                    counts[(key, name, cell.ts)] = counts.get((key, name, cell.ts), 0) + 1
    return counts


def _micros(value: Any) -> int:
    """A ``timestamp`` column value (a naive UTC datetime) as µs since the epoch."""
    import datetime

    aware = value.replace(tzinfo=datetime.UTC) if value.tzinfo is None else value
    return (aware - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(microseconds=1)


def _marks(names: Sequence[str]) -> str:
    return ", ".join("?" for _ in names)


def _state_value(spec: _Table, writer: ScyllaCdcWriter, name: str, value: Any) -> Any:
    """A column value as the driver read it, in the form the image state keeps (sets, dicts,
    user-type values as tuples of their fields)."""
    kind = writer._state_kind(spec, name)
    if kind == "udt":
        return tuple(value)
    if kind == "set":
        return set(value)
    if kind == "map":
        return dict(value)
    if kind == "list":
        return list(value)
    return value
