"""A synthetic change source with the offsets and watermarks of a real one.

Every event is a pure function of (seed, partition, sequence number), so ``read`` is
deterministic and a test can recompute exactly which events a run must have delivered. Keys are
split between partitions the way a database shards them: a key lives in one partition only, so
per-key order is per-partition order.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pydantic import Field, model_validator

from cdcflow.batches import BatchTable, EventBatch
from cdcflow.contract import Offset, Partition, PluginConfig, PluginContext, Source
from cdcflow.events import ChangeEvent, Column, Op, Record, RowSchema, SourceInfo
from cdcflow.native import native_module

__all__ = ["DatagenConfig", "DatagenSource", "expected_event_ids"]

_MASK64 = (1 << 64) - 1


class DatagenConfig(PluginConfig):
    count: int | None = Field(default=None, ge=0, description="events in all; null: endless")
    tables: int = Field(default=3, ge=1, le=1000)
    keys: int = Field(default=10_000, ge=1, description="distinct primary keys over all tables")
    partitions: int = Field(default=4, ge=1, le=4096)
    rate: float | None = Field(
        default=None, gt=0, description="events per second over all partitions; null: as fast as read"
    )
    op_mix: dict[str, float] = Field(default_factory=lambda: {"c": 0.5, "u": 0.4, "d": 0.1})
    event_size: int = Field(default=256, ge=0, le=1_000_000, description="bytes of the payload column")
    seed: int = 0
    cluster: str = "datagen"
    keyspace: str = "shop"

    @model_validator(mode="after")
    def _check_op_mix(self) -> DatagenConfig:
        unknown = set(self.op_mix) - {"c", "u", "d"}
        if unknown or not self.op_mix or any(w < 0 for w in self.op_mix.values()) or sum(self.op_mix.values()) <= 0:
            raise ValueError("op_mix maps c/u/d to non-negative weights with a positive sum")
        return self


def _mix(value: int) -> int:
    """splitmix64: a fast, well-spread 64-bit hash of an integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def expected_event_ids(config: DatagenConfig) -> set[int]:
    """Global ids (``after.seq`` / ``before.seq``) of every event a bounded datagen produces."""
    if config.count is None:
        raise ValueError("an endless datagen has no finite set of events")
    return set(range(config.count))


class DatagenSource(Source[DatagenConfig]):
    """``datagen``: deterministic synthetic changes over ``tables`` tables and ``keys`` keys.

    Offsets are ``{"seq": n, "ts_us": t, "epoch_us": e}``: the partition's first ``n`` events are
    complete, the last of them happened at ``t``. With a ``rate`` event times follow the rate from
    ``epoch_us`` (the start), so an event's time is its own whatever range reads it; without one,
    the events of a read range are spread between the range's start and end times, so a replay
    over differently cut ranges gives the same events with other times (content is unchanged).
    """

    type_name = "datagen"
    config_model = DatagenConfig

    def __init__(self, config: DatagenConfig, context: PluginContext, clock: Callable[[], float] = time.time) -> None:
        super().__init__(config, context)
        self.bounded = config.count is not None
        self._clock = clock
        self._table_names = [f"table_{i}" for i in range(config.tables)]
        self._schemas = [self._row_schema(name) for name in self._table_names]
        self._op_thresholds = self._thresholds(config.op_mix)
        rng = random.Random(config.seed)
        self._payload_pool = "".join(rng.choices(string.ascii_letters + string.digits, k=2 * config.event_size + 1))
        self._names = [f"customer-{i}" for i in range(1000)]
        # Derived once: event() runs per record.
        self._seed_mix = _mix(config.seed)
        self._keys_per_partition = max(1, config.keys // config.partitions)
        self._payload_starts = config.event_size + 1
        self._partition_ids = [f"datagen-{p}" for p in range(config.partitions)]
        self._plan: Any = False  # the compiled generator: built on first use (None: not available)
        self._batch_tables = [
            BatchTable(schema, "datagen", config.cluster, config.keyspace, name)
            for schema, name in zip(self._schemas, self._table_names, strict=True)
        ]

    def _row_schema(self, table: str) -> RowSchema:
        key = (Column("id", "bigint", optional=False),)
        values = (
            Column("id", "bigint", optional=False),
            Column("seq", "bigint", optional=False),
            Column("name", "text"),
            Column("amount", "double"),
            Column("payload", "text"),
            Column("updated_at_us", "bigint"),
        )
        return RowSchema(f"{self.config.cluster}.{self.config.keyspace}.{table}", key, values)

    @staticmethod
    def _thresholds(op_mix: dict[str, float]) -> list[tuple[int, Op]]:
        total = sum(op_mix.values())
        thresholds, running = [], 0.0
        for code in ("c", "u", "d"):
            running += op_mix.get(code, 0.0)
            thresholds.append((round(running / total * 1_000_000), Op(code)))
        return thresholds

    # --- contract ----------------------------------------------------------------------------

    def partitions(self) -> Sequence[Partition]:
        return [Partition(pid, {"index": p}) for p, pid in enumerate(self._partition_ids)]

    def _events_in(self, partition: Partition) -> int | None:
        if self.config.count is None:
            return None
        p, n = partition.info["index"], self.config.partitions
        return self.config.count // n + (1 if p < self.config.count % n else 0)

    def initial_offset(self, partition: Partition) -> Offset:
        now_us = int(self._clock() * 1_000_000)
        return {"epoch_us": now_us, "seq": 0, "ts_us": now_us}

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        now_us = int(self._clock() * 1_000_000)
        available = self._events_in(partition)
        if self.config.rate is not None:
            per_partition = self.config.rate / self.config.partitions
            due = int((now_us - start["epoch_us"]) / 1e6 * per_partition)
            available = due if available is None else min(available, due)
        end_seq = start["seq"] + (max_records or 1_000_000)
        if available is not None:
            end_seq = min(end_seq, available)
        if end_seq <= start["seq"]:
            return start
        return {"epoch_us": start["epoch_us"], "seq": end_seq, "ts_us": self._time_of(end_seq, start, None, now_us)}

    def _time_of(self, seq: int, start: Offset, end: Offset | None, now_us: int) -> int:
        if self.config.rate is not None:
            return int(start["epoch_us"] + seq * self.config.partitions / self.config.rate * 1e6)
        if end is None:
            return now_us
        span = end["seq"] - start["seq"]
        return int(start["ts_us"] + (end["ts_us"] - start["ts_us"]) * (seq - start["seq"]) / span)

    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        return int(offset["ts_us"])

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        total = self._events_in(partition)
        return total is not None and offset["seq"] >= total

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        index = partition.info["index"]
        for seq in range(start["seq"] + 1, end["seq"] + 1):
            yield self.event(index, seq, self._time_of(seq, start, end, 0))

    def read_event_batches(
        self, partition: Partition, start: Offset, end: Offset, batch_size: int
    ) -> Iterator[EventBatch] | None:
        plan = self._compiled_plan()
        first, last = start["seq"] + 1, end["seq"]
        span = (start["seq"], start["ts_us"], end["seq"], end["ts_us"])
        if plan is None or (self.config.rate is None and abs(span[3] - span[1]) * (span[2] - span[0]) >= 1 << 53):
            return None  # times the compiled generator would not round as event() does
        return self._compact_batches(plan, partition.info["index"], first, last, span, start["epoch_us"], batch_size)

    def _compact_batches(
        self,
        plan: Any,
        index: int,
        first: int,
        last: int,
        span: tuple[int, int, int, int],
        epoch_us: int,
        batch_size: int,
    ) -> Iterator[EventBatch]:
        for low in range(first, last + 1, batch_size):
            high = min(last, low + batch_size - 1)
            ts_ms = int(time.time() * 1000)
            events = plan.batch(index, self._partition_ids[index], low, high, span, epoch_us, self.config.rate, ts_ms)
            yield EventBatch(events, self._batch_tables)

    def _compiled_plan(self) -> Any:
        """The compiled core's generator for this config (built once), None without the core."""
        if self._plan is False:
            native = native_module()
            config = self.config
            # Event ids and keys as 64-bit ints, as the compiled generator holds them.
            fits = config.keys < 1 << 40 and config.partitions * (1 + (config.count or 0)) < 1 << 62
            self._plan = None
            if native is not None and fits:
                thresholds = [(limit, op.value) for limit, op in self._op_thresholds]
                self._plan = native.DatagenPlan(
                    self._seed_mix,
                    config.partitions,
                    self._keys_per_partition,
                    config.tables,
                    thresholds,
                    self._payload_pool,
                    config.event_size,
                )
        return self._plan

    # --- event synthesis ---------------------------------------------------------------------

    def event(self, partition_index: int, seq: int, ts_us: int) -> ChangeEvent:
        """The ``seq``-th event (1-based) of a partition, happening at ``ts_us``."""
        config = self.config
        partitions = config.partitions
        global_id = (seq - 1) * partitions + partition_index
        h = _mix(global_id ^ self._seed_mix)
        key_id = partition_index + partitions * (h % self._keys_per_partition)
        table_index = key_id % config.tables
        op = self._op_of((h >> 24) % 1_000_000)
        start = (h >> 32) % self._payload_starts
        row: dict[str, Any] = {
            "id": key_id,
            "seq": global_id,
            "name": self._names[(h >> 8) % 1000],
            "amount": ((h >> 16) % 10_000_000) / 100,
            "payload": self._payload_pool[start : start + config.event_size],
            "updated_at_us": ts_us,
        }
        before = after = None
        if op is Op.CREATE:
            after = row
        elif op is Op.UPDATE:
            after = row
            before = {**row, "amount": row["amount"] / 2, "updated_at_us": ts_us - 1}
        else:
            before = row
        source = SourceInfo(
            "datagen",
            config.cluster,
            config.keyspace,
            self._table_names[table_index],
            self._partition_ids[partition_index],
            {"seq": seq},
            ts_us,
        )
        return ChangeEvent(
            op, {"id": key_id}, before, after, source, int(time.time() * 1000), self._schemas[table_index]
        )

    def _op_of(self, draw: int) -> Op:
        for limit, op in self._op_thresholds:
            if draw < limit:
                return op
        return self._op_thresholds[-1][1]
