"""Whether the group still counts this worker as a member: what lets a zombie stop writing.

A member frozen past its session (SIGSTOP, a paused VM, a long GC) or cut off from the brokers is
expelled by the group and its buckets given to others, but it learns so only at its coordinator's
next exchange with the group, and its delivery loop writes meanwhile: the records of a woken
zombie (thousands, with either coordinator) were duplicates. The checkpoint store's fence refuses
its commits, and with exactly_once its transactions, but not what an at-least-once sink writes.

So each member asks the group itself (``DescribeGroups``, through an admin client of its own)
every heartbeat interval whether its coordinator's client is still among the members:

* ``fresh()``: listed by an answer that started less than ``session_timeout_s`` ago. A loop that
  finds it stale (frozen since, or the brokers unreachable) writes nothing until an answer comes;
* ``on_expelled``: an answer that no longer lists it, after one did: its buckets are lost now,
  whatever the coordinator has said so far.

Members are told apart by their coordinator's ``client.id``, made unique per worker
(:func:`member_client_id`): the client ids of the group's own coordinator clients carry no quota
or ACL meaning for the pipeline's data.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from cdcflow.group.config import GroupConfig

__all__ = ["MembershipWatch", "member_client_id"]

log = logging.getLogger("cdcflow.group")


def member_client_id(config: GroupConfig, worker_id: str) -> str:
    """The client id of this worker's coordinator: the configured one, this worker's id and pid."""
    return f"{config.kafka.client_id}-{worker_id}-{os.getpid()}"


class MembershipWatch:
    """Asks the group every heartbeat interval whether ``client_id`` is a member (module doc)."""

    def __init__(
        self,
        config: GroupConfig,
        client_id: str,
        settings: Callable[[Mapping[str, Any]], dict[str, Any]],
        on_expelled: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.client_id = client_id
        self._settings = settings
        self._on_expelled = on_expelled
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Until a first answer, the join itself stands for one: a member starts fresh.
        self.confirmed_at = clock()
        self._listed = False  # the last answer listed this worker

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="group-membership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.session_timeout_s)

    def fresh(self) -> bool:
        """Listed as a member by an answer that began less than a session ago."""
        return self._clock() - self.confirmed_at < self.config.session_timeout_s

    def _watch(self) -> None:
        admin = AdminClient(self._settings({}))
        while not self._stop.wait(self.config.heartbeat_interval_s):
            asked_at = self._clock()
            try:
                described = admin.describe_consumer_groups(
                    [self.config.id], request_timeout=self.config.session_timeout_s
                )[self.config.id].result()
            except KafkaException as exc:
                log.debug("group %s: cannot ask who its members are: %s", self.config.id, exc)
                continue  # stale after a session without answers: the loop stops writing
            listed = any(member.client_id == self.client_id for member in described.members)
            if listed:
                self.confirmed_at = asked_at
            elif self._listed:
                log.warning(
                    "group %s: this worker is no longer a member (its session expired): its buckets belong to "
                    "others now; it writes nothing more for them",
                    self.config.id,
                )
                self._on_expelled()
            self._listed = listed
