"""The group's own topics on the real Kafka: members starting together all see the same shape."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from cdcflow.group.topics import GroupTopicError, ensure_topic

pytestmark = [pytest.mark.kafka]


def test_members_starting_together_all_see_the_buckets_the_topic_was_created_with(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    # One member creates the topic; the others get TOPIC_ALREADY_EXISTS while the broker may still be
    # propagating its metadata (no partitions yet): they must wait for it, not report 0 buckets.
    settings = {"bootstrap.servers": kafka_bootstrap}
    names = [f"{topic_prefix}.buckets-{i}" for i in range(4)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        for name in names:
            counts = list(pool.map(lambda topic: ensure_topic(settings, topic, 4, 1, exact=True), [name] * 6))
            assert counts == [4] * 6, (name, counts)


def test_a_member_with_other_buckets_is_refused_with_the_count_the_group_has(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    settings = {"bootstrap.servers": kafka_bootstrap}
    name = f"{topic_prefix}.buckets"
    assert ensure_topic(settings, name, 3, 1, exact=True) == 3
    with pytest.raises(GroupTopicError, match=r"has 3 partitions but engine.group.buckets is 5"):
        ensure_topic(settings, name, 5, 1, exact=True)
    # Not exact (a topic whose partition count is the group's own business): the count found.
    assert ensure_topic(settings, name, 5, 1, exact=False) == 3
