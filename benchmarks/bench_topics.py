"""The benchmarks' Kafka topics: made for one run and deleted when the process exits.

Each run names its topics afresh; kept, they pile up on the broker (its start time grows with the
partitions it opens: 13,000 took over two minutes), and one run's topics tell the next nothing.
"""

from __future__ import annotations

import atexit
from typing import Any


def create_topics(bootstrap: str, names: list[str], partitions: int = 3, config: dict[str, str] | None = None) -> None:
    """Creates ``names`` (replication 1) and deletes them when this process exits."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1, config=config or {}) for n in names])
    for future in futures.values():
        future.result(30)
    atexit.register(_delete_topics, admin, list(names))


def _delete_topics(admin: Any, names: list[str]) -> None:
    for future in admin.delete_topics(names, operation_timeout=30).values():
        try:
            future.result(60)
        except Exception as exc:  # the figures are out; a leftover topic is only said
            print(f"benchmark: topic not deleted: {exc}")
