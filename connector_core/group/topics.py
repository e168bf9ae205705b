"""The group's own topics: created on first use, checked on every start."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from cdcflow.errors import ConfigError, GroupUnavailableError

__all__ = ["GroupTopicError", "ensure_topic"]


class GroupTopicError(ConfigError):
    """A group topic exists with a shape the group's config does not match."""


def ensure_topic(
    settings: Mapping[str, Any],
    name: str,
    partitions: int,
    replication_factor: int,
    exact: bool,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Create ``name`` unless it exists; returns its number of partitions. With ``exact``, an
    existing topic must have exactly ``partitions`` (the assignment topic: its partition count is
    the number of buckets, and every member must agree on it)."""
    admin = AdminClient(dict(settings))
    future = admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(config or {}))])[name]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise GroupUnavailableError(f"cannot create topic {name}: {exc}") from exc
    except Exception as exc:  # a timeout from the future: no broker answered
        raise GroupUnavailableError(f"cannot create topic {name}: {exc}") from exc
    # Whether this worker created the topic or another member did a moment ago, its metadata can
    # still be propagating (no partitions, or partitions without a leader): only a topic whose every
    # partition is led shows the partition count it was created with.
    found = _led_partition_count(admin, name, timeout_s)
    if exact and found != partitions:
        raise GroupTopicError(
            f"topic {name} has {found} partitions but engine.group.buckets is {partitions}: every worker of a "
            f"group must use the buckets the group was created with ({found}), or give the group a new id"
        )
    return found


def _led_partition_count(admin: AdminClient, name: str, timeout_s: float) -> int:
    """The number of partitions of ``name`` once it has some and every one has a leader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            described = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        except KafkaException:
            described = None
        if (
            described is not None
            and described.error is None
            and described.partitions
            and all(p.leader >= 0 for p in described.partitions.values())
        ):
            return len(described.partitions)
        time.sleep(0.1)
    raise GroupUnavailableError(f"topic {name} exists but has no led partitions after {timeout_s:g} s")
