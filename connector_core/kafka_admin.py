"""What a Kafka cluster says about itself and its topics, for the prerequisite checks of every
cdcflow Kafka client (the kafka source and sink, the kafka checkpoint store): the kafka plugins
share it as they share :mod:`cdcflow.kafka_client`.

Topics are looked up in the full metadata, never asked for by name: a metadata request naming a
topic can create it on a broker with ``auto.create.topics.enable``, and a check must change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdcflow.errors import CdcflowError
from cdcflow.kafka_client import KafkaClientConfig
from cdcflow.prerequisites import CheckResult

__all__ = ["KafkaAdminError", "KafkaView", "TopicView", "check_topic_replicas", "check_transactions", "view_of"]


class KafkaAdminError(CdcflowError):
    """The cluster did not describe itself or its topics within the time given."""


@dataclass(frozen=True)
class TopicView:
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class KafkaView:
    """The brokers, one broker's configuration, and each topic asked about (None: no such topic)."""

    bootstrap_servers: str
    brokers: int
    broker_configs: Mapping[str, str]
    topics: Mapping[str, TopicView | None]


def view_of(kafka: KafkaClientConfig, bootstrap_servers: str, topics: Sequence[str], timeout_s: float) -> KafkaView:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import ConfigResource  # re-exported by .admin without __all__
    from confluent_kafka.admin._resource import ResourceType

    admin = AdminClient(kafka.librdkafka_settings(bootstrap_servers))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
        broker_id = metadata.controller_id if metadata.controller_id >= 0 else next(iter(metadata.brokers))
        broker = ConfigResource(ResourceType.BROKER, str(broker_id))
        existing = [name for name in topics if name in metadata.topics]
        resources = [broker, *(ConfigResource(ResourceType.TOPIC, name) for name in existing)]
        described = {
            resource.name: {name: str(entry.value) for name, entry in future.result(timeout=timeout_s).items()}
            for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items()
        }
    except KafkaException as exc:
        raise KafkaAdminError(f"Kafka at {bootstrap_servers}: {exc.args[0].str()}") from exc
    except TimeoutError as exc:  # a future not answered in time
        raise KafkaAdminError(f"Kafka at {bootstrap_servers} did not describe its configuration: {exc}") from exc
    views: dict[str, TopicView | None] = dict.fromkeys(topics)
    for name in existing:
        partitions = metadata.topics[name].partitions
        replicas = min((len(p.replicas) for p in partitions.values()), default=0)
        views[name] = TopicView(len(partitions), replicas, described[name])
    return KafkaView(bootstrap_servers, len(metadata.brokers), described[broker.name], views)


def check_topic_replicas(topic: str, view: TopicView, broker_configs: Mapping[str, str]) -> CheckResult:
    """``acks=all`` writes need ``min.insync.replicas`` in-sync replicas: more than the topic has
    and every write fails (NOT_ENOUGH_REPLICAS)."""
    check = f"topic {topic}: replicas for acks=all"
    needed = int(view.configs.get("min.insync.replicas", broker_configs.get("min.insync.replicas", "1")))
    found = f"replication factor {view.replication_factor}, min.insync.replicas {needed}"
    if view.replication_factor < needed:
        return CheckResult.fail(
            check,
            f"{found}: every acks=all write is refused (NOT_ENOUGH_REPLICAS)",
            f"kafka-configs --alter --entity-type topics --entity-name {topic} --add-config "
            f"min.insync.replicas={view.replication_factor}, or add replicas",
        )
    return CheckResult.ok(check, found)


def check_transactions(
    kafka: KafkaClientConfig, bootstrap_servers: str, transactional_id: str, timeout_s: float
) -> CheckResult:
    """A transactional producer initialises: the cluster has a transaction coordinator (its
    ``__transaction_state`` topic can be written at ``transaction.state.log.replication.factor``).
    The id is the check's own; no transaction is begun."""
    from confluent_kafka import KafkaException, Producer

    check = "transactions available"
    producer = Producer(kafka.librdkafka_settings(bootstrap_servers, {"transactional.id": transactional_id}))
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        return CheckResult.fail(
            check,
            f"a transactional producer could not initialise: {exc.args[0].str()}",
            "give the cluster at least transaction.state.log.replication.factor brokers (and "
            "transaction.state.log.min.isr in sync), or lower them",
        )
    finally:
        producer.flush(0)
    return CheckResult.ok(check, "a transactional producer initialised")
