"""Settings every cdcflow Kafka client shares: the kafka source and sink, the dead-letter sink, the
kafka checkpoint store and worker groups all talk to Kafka, so they build their clients here."""

from __future__ import annotations

from typing import Any

__all__ = ["TOMBSTONE_HEADER", "client_settings"]

TOMBSTONE_HEADER = "cdcflow.tombstone"
"""Marks the tombstone the kafka sink writes after a delete (``tombstones_on_delete``), so a reader of
cdcflow's topics (the kafka source) can tell it from a delete of its own: an unwrapped delete is a
null value too."""


def client_settings(bootstrap_servers: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings shared by every cdcflow Kafka client."""
    return {"bootstrap.servers": bootstrap_servers, "client.id": "cdcflow", "log_level": 3, **(extra or {})}
