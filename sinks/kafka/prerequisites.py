"""What the ``kafka`` sink and the ``kafka`` checkpoint store need of the cluster, checked
(``cdcflow doctor``; nothing at start, where the first write or commit tells soon enough).

* The checkpoint topic must be compacted, like Kafka Connect's offsets topic: with
  ``cleanup.policy=delete`` the broker deletes checkpoints after ``retention.ms``, and a pipeline
  stopped that long restarts its partitions from their initial offsets (re-reading history, or
  skipping it).
* ``acks=all`` writes need ``min.insync.replicas`` replicas in sync: a topic with fewer replicas
  refuses every write.
* A worker group commits checkpoints in transactions: the cluster must initialise a
  transactional producer, with a ``transaction.max.timeout.ms`` that admits the store's timeout.
* A topic the sink writes to must exist, or the broker must create topics on first write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cdcflow.kafka_admin import check_topic_replicas, check_transactions, view_of
from cdcflow.prerequisites import CheckResult, PrerequisiteScope

if TYPE_CHECKING:
    from cdcflow.sinks.kafka.checkpoint_store import KafkaCheckpointConfig
    from cdcflow.sinks.kafka.sink import KafkaSinkConfig

__all__ = ["check_checkpoint_topic", "check_sink_topics"]


def check_checkpoint_topic(config: KafkaCheckpointConfig, pipeline: str, scope: PrerequisiteScope) -> list[CheckResult]:
    view = view_of(config.kafka, config.bootstrap_servers, [config.topic], scope.timeout_s)
    check = f"checkpoint topic {config.topic} compacted"
    topic = view.topics[config.topic]
    results = []
    if topic is None:
        if config.replication_factor > view.brokers:
            results.append(
                CheckResult.fail(
                    check,
                    f"not there yet, and it would be created with replication_factor {config.replication_factor} "
                    f"on a cluster of {view.brokers} broker(s)",
                    f"set checkpoint.replication_factor to at most {view.brokers}, or create the topic compacted",
                )
            )
        else:
            results.append(
                CheckResult.ok(
                    check,
                    f"not there yet: the first start creates it with cleanup.policy=compact, {config.partitions} "
                    f"partitions, replication factor {config.replication_factor}",
                )
            )
    else:
        policy = {p.strip() for p in topic.configs.get("cleanup.policy", "delete").split(",")}
        retention = topic.configs.get("retention.ms", "?")
        if "compact" not in policy:
            results.append(
                CheckResult.fail(
                    check,
                    f"cleanup.policy={','.join(sorted(policy))}: the broker deletes checkpoints after retention.ms "
                    f"({retention} ms), and a pipeline stopped that long restarts its partitions from their start",
                    f"kafka-configs --alter --entity-type topics --entity-name {config.topic} "
                    "--add-config cleanup.policy=compact",
                )
            )
        elif "delete" in policy:
            results.append(
                CheckResult.warn(
                    check,
                    f"cleanup.policy=compact,delete: checkpoints older than retention.ms ({retention} ms) are deleted",
                    f"set cleanup.policy=compact on {config.topic}",
                )
            )
        else:
            results.append(CheckResult.ok(check, "cleanup.policy=compact"))
        results.append(check_topic_replicas(config.topic, topic, view.broker_configs))
    if scope.transactions:
        results.append(_check_transaction_timeout(config, view.broker_configs))
        results.append(
            check_transactions(config.kafka, config.bootstrap_servers, f"cdcflow-doctor-{pipeline}", scope.timeout_s)
        )
    return results


def _check_transaction_timeout(config: KafkaCheckpointConfig, broker_configs: Mapping[str, str]) -> CheckResult:
    check = "checkpoint transaction_timeout_s within the broker's transaction.max.timeout.ms"
    limit_ms = int(broker_configs.get("transaction.max.timeout.ms", "900000"))
    wanted_ms = int(config.transaction_timeout_s * 1000)
    if wanted_ms > limit_ms:
        return CheckResult.fail(
            check,
            f"{wanted_ms} ms asked, the broker admits {limit_ms} ms: every group commit would be refused",
            f"set checkpoint.transaction_timeout_s to at most {limit_ms // 1000}",
        )
    return CheckResult.ok(check, f"{wanted_ms} ms of at most {limit_ms} ms")


def check_sink_topics(config: KafkaSinkConfig, scope: PrerequisiteScope) -> list[CheckResult]:
    topics = [config.topic] if config.topic else []
    view = view_of(config.kafka, config.bootstrap_servers, topics, scope.timeout_s)
    creates = view.broker_configs.get("auto.create.topics.enable", "true").lower() == "true"
    if not config.topic:
        check = "topics <cluster>.<keyspace>.<table>"
        if creates:
            return [CheckResult.ok(check, "the broker creates each on first write (auto.create.topics.enable)")]
        return [
            CheckResult.warn(
                check,
                "the broker does not create topics (auto.create.topics.enable: false): a write to a topic not "
                "created beforehand fails",
                "create each table's topic before the pipeline starts, or route them to existing topics",
            )
        ]
    topic = view.topics[config.topic]
    check = f"topic {config.topic}"
    if topic is None:
        if creates:
            return [CheckResult.ok(check, "not there yet: the broker creates it on first write")]
        return [
            CheckResult.fail(
                check,
                "no such topic, and the broker does not create topics (auto.create.topics.enable: false)",
                f"create {config.topic}, or correct sink.topic",
            )
        ]
    results = [check_topic_replicas(config.topic, topic, view.broker_configs)]
    policy = topic.configs.get("cleanup.policy", "delete")
    if "compact" in policy and not config.tombstones_on_delete:
        results.append(
            CheckResult.warn(
                f"topic {config.topic}: deleted keys",
                "compacted, and tombstones_on_delete is off: a deleted key keeps its last record for good",
                "set sink.tombstones_on_delete: true",
            )
        )
    return results
