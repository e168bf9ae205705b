"""The kafka checkpoint store's transactions and fencing bookkeeping through its producer seam
(cdcflow.sinks.kafka.producer): which producer each bucket gets, what a failed, retried or fenced
commit leaves for the next one. The store's reads and Kafka's fencing itself are tested against the
real broker (tests/integration/test_kafka_checkpoints_and_dead_letters.py, test_worker_groups*)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdcflow.contract import Checkpoint, PluginContext
from cdcflow.errors import CheckpointUnavailableError
from cdcflow.sinks.kafka.checkpoint_store import KafkaCheckpointConfig, KafkaCheckpointStore
from tests.unit.sinks.kafka.recording_producer import RecordingProducers

CHECKPOINT = Checkpoint({"seq": 7}, 1_700_000_000_000_000, 1_700_000_001_000_000)


def store_with(producers: RecordingProducers, buckets: list[int]) -> KafkaCheckpointStore:
    config = KafkaCheckpointConfig(type="kafka", bootstrap_servers="127.0.0.1:1", topic="unit-offsets")
    store = KafkaCheckpointStore(config, PluginContext("unit", Path("unit.yaml")), producer_factory=producers)
    store._fence_new(buckets)  # claim() without its read of the topic, which needs a broker
    return store


def test_each_claimed_bucket_is_fenced_with_its_own_transactional_id() -> None:
    # Mutant killed: _fence building the producer without the bucket's transactional.id (two
    # buckets, or two owners of one, would not fence each other).
    producers = RecordingProducers()
    store = store_with(producers, [0, 3])
    assert store.claimed() == frozenset({0, 3})
    ids = sorted(p.settings["transactional.id"] for p in producers.made)
    assert ids == ["cdcflow-unit-b0", "cdcflow-unit-b3"]
    assert all(p.calls == ["init_transactions"] for p in producers.made)


def test_a_commit_that_failed_is_aborted_before_the_next_transaction_begins() -> None:
    # Mutant killed: _commit_bucket not setting needs_abort (the next begin_transaction would fail
    # on the transaction the failed commit left open).
    failed = KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out", txn_requires_abort=True))
    producers = RecordingProducers(prepare=lambda p: p.fail_next("commit_transaction", failed))
    store = store_with(producers, [0])
    with pytest.raises(CheckpointUnavailableError, match="bucket 0"):
        store.commit_claimed({0: {"p0": CHECKPOINT}})
    assert store.commit_claimed({0: {"p0": CHECKPOINT}}) == frozenset()
    (producer,) = producers.made
    second = producer.calls[producer.calls.index("commit_transaction") + 1 :]
    assert second == ["abort_transaction", "begin_transaction", "produce", "commit_transaction"]


def test_a_commit_whose_outcome_is_unknown_is_called_again() -> None:
    # Mutant killed: _commit_transaction raising on a retriable error (a timed-out commit that went
    # through would be reported as failed and aborted).
    unknown = KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True))
    producers = RecordingProducers(prepare=lambda p: p.fail_next("commit_transaction", unknown))
    store = store_with(producers, [0])
    assert store.commit_claimed({0: {"p0": CHECKPOINT}}) == frozenset()
    (producer,) = producers.made
    assert producer.calls[1:] == ["begin_transaction", "produce", "commit_transaction", "commit_transaction"]


def test_a_fenced_commit_gives_the_bucket_up() -> None:
    # Mutant killed: commit_claimed not releasing the fenced buckets (the worker would go on
    # committing, as a zombie, for a bucket another worker owns).
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    producers = RecordingProducers(prepare=lambda p: p.fail_next("commit_transaction", fenced))
    store = store_with(producers, [0, 1])
    assert store.commit_claimed({0: {"p0": CHECKPOINT}, 1: {}}) == frozenset({0})
    assert store.claimed() == frozenset({1})
    bucket_0 = next(p for p in producers.made if p.settings["transactional.id"] == "cdcflow-unit-b0")
    assert bucket_0.calls[-1] == "close"
