"""Exactly once into a transactional system: a sink's records and the checkpoint that covers them,
committed as one transaction.

Kafka Connect's exactly-once source support (KIP-618, ``transaction.boundary=interval``) writes a
task's records and its source offsets in one producer transaction; cdcflow does the same with a
sink and a checkpoint store of one system (the ``kafka`` sink with ``delivery: exactly_once`` and
the ``kafka`` checkpoint store). Both implement the capability protocols below; the delivery loop
(:mod:`cdcflow.pipeline`) looks for them by protocol and never learns what a transaction is made
of: the store lends each *transaction unit* (a worker group's bucket, or the whole process without
a group) a lane, an open transaction the sink writes into, and commits it with the checkpoints.

The loop's part, per unit (:class:`TransactionRouting`):

1. ``store.claim(units, unit_of)`` fences whoever held the unit before and ends what it left open
   (Kafka's ``init_transactions``), then reads the unit's checkpoints.
2. Before writing a partition's records: ``sink.write_into(store.transaction_lane(unit))`` (and the
   dead-letter sink's too, when it can join): the records go into the unit's open transaction.
3. At a checkpoint, for each unit written since the last: the lane again, ``sink.flush()`` (every
   record delivered into the transaction), the dead letters flushed into it; then
   ``store.commit_claimed`` writes the checkpoints into the same transaction and commits it. A
   ``read_committed`` reader sees the interval's records and its checkpoint together, or neither.
4. Any failure ends every open transaction (``store.release``) and claims the units again, which
   reads back what is committed: the run goes on from exactly there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from cdcflow.contract import Checkpoint, FencingCheckpointStore
from cdcflow.errors import TransactionFencedError

__all__ = [
    "Delivery",
    "TransactionDomain",
    "TransactionRouting",
    "TransactionalSink",
    "TransactionalSinkConfig",
    "TransactionalStore",
    "TransactionalStoreConfig",
    "exactly_once_requested",
    "fenced_out_of_the_pipeline",
]

log = logging.getLogger("cdcflow.transactions")

Delivery = Literal["at_least_once", "exactly_once"]


@dataclass(frozen=True)
class TransactionDomain:
    """Where a transaction can span: one system (``kafka``) at some addresses. A sink and a store
    can share transactions only within one domain: the same system, and addresses of one cluster
    (checked offline as sharing an address; a plugin checks the cluster's identity at run time)."""

    system: str
    addresses: frozenset[str]

    def shared_with(self, other: TransactionDomain) -> bool:
        return self.system == other.system and bool(self.addresses & other.addresses)

    def describe(self) -> str:
        return f"{self.system} at {', '.join(sorted(self.addresses))}"


@runtime_checkable
class TransactionalSinkConfig(Protocol):
    """A sink config that can ask for exactly-once delivery (``delivery: exactly_once``)."""

    delivery: Delivery

    def transaction_domain(self) -> TransactionDomain: ...


@runtime_checkable
class TransactionalStoreConfig(Protocol):
    """A checkpoint store config whose commits can join a sink's transactions."""

    def transaction_domain(self) -> TransactionDomain: ...


@runtime_checkable
class TransactionalSink(Protocol):
    """A sink that writes into lanes a :class:`TransactionalStore` lends it.

    ``new_transaction_lane`` builds the client a lane is made of (for Kafka: a producer with the
    sink's settings and ``transactional_id``), which the store then owns: it fences with it,
    begins, commits and aborts its transactions. ``write_into`` makes every later ``write``,
    ``write_event_batch`` and ``flush`` go into ``lane``; ``flush`` then returns once every record
    written into the lane is delivered into its open transaction (committed only by the store), and
    raises :class:`~cdcflow.errors.TransactionFencedError` when the lane's client was fenced.
    """

    def new_transaction_lane(self, transactional_id: str, timeout_s: float) -> Any: ...

    def write_into(self, lane: Any) -> None: ...


@runtime_checkable
class TransactionalStore(Protocol):
    """A fencing checkpoint store (:class:`~cdcflow.contract.FencingCheckpointStore`) that commits
    a unit's checkpoints in the transaction its lane holds open.

    After ``make_lanes_with(factory)``, ``claim`` builds each unit's lane with ``factory`` and
    fences with it; ``transaction_lane(unit)`` begins the unit's transaction if none is open and
    returns the lane; ``commit_claimed`` commits each listed unit's open transaction with its
    checkpoints (an empty mapping commits the records alone); ``release`` aborts what is open."""

    def make_lanes_with(self, factory: Callable[[str, float], Any]) -> None: ...

    def transaction_lane(self, unit: int) -> Any: ...


def exactly_once_requested(sink_config: Any) -> bool:
    """Whether a sink's config asks for exactly-once delivery."""
    return isinstance(sink_config, TransactionalSinkConfig) and sink_config.delivery == "exactly_once"


@dataclass
class TransactionRouting:
    """The delivery loop's side of exactly once: which unit's lane the sinks write into, which
    units have records waiting for their commit, and the commit of them all."""

    sink: TransactionalSink
    store: FencingCheckpointStore[Any]
    dead_letter: TransactionalSink | None
    unit_of: Callable[[str], int]
    written: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        assert isinstance(self.store, TransactionalStore)
        self._lanes: TransactionalStore = self.store
        self._lanes.make_lanes_with(self.sink.new_transaction_lane)

    def enter(self, unit: int) -> None:
        """Every later write of the sink (and the dead-letter sink) goes into ``unit``'s transaction."""
        lane = self._lanes.transaction_lane(unit)
        self.sink.write_into(lane)
        if self.dead_letter is not None:
            self.dead_letter.write_into(lane)
        self.written.add(unit)

    def enter_partition(self, partition_id: str) -> None:
        self.enter(self.unit_of(partition_id))

    def commit(self, changed: Mapping[str, Checkpoint]) -> tuple[dict[str, Checkpoint], frozenset[int]]:
        """Commit ``changed`` and every written unit's records, one transaction per unit: what was
        committed, and the units another process fenced this one out of (nothing of theirs was)."""
        by_unit: dict[int, dict[str, Checkpoint | None]] = {unit: {} for unit in self.written}
        for pid, checkpoint in changed.items():
            by_unit.setdefault(self.unit_of(pid), {})[pid] = checkpoint
        fenced = self.store.commit_claimed(by_unit)
        self.written -= set(by_unit)
        committed = {pid: c for pid, c in changed.items() if self.unit_of(pid) not in fenced}
        return committed, fenced

    def forget(self, units: Collection[int]) -> None:
        """End ``units``' open transactions uncommitted (aborted, or already fenced) and give up
        their claims: a later claim reads back what is committed."""
        self.written -= set(units)
        self.store.release(units)

    def forget_all(self) -> None:
        self.forget(self.store.claimed())


def fenced_out_of_the_pipeline(pipeline: str, units: Collection[int]) -> TransactionFencedError:
    """What a process without a group raises when another process took its transactional id."""
    return TransactionFencedError(
        f"pipeline {pipeline}: another process took over its transactions (unit {sorted(units)}): two "
        "processes run this pipeline; this one stops, and nothing it wrote since its last checkpoint is visible"
    )
