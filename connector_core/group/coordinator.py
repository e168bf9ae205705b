"""Group membership: who owns which bucket, decided by Kafka's group protocol.

Two coordinators implement one interface. Both subscribe to the group's assignment topic (one
partition per bucket, never written to) and translate partition assignments into bucket
ownership for a :class:`BucketListener`:

* ``faust`` (default): faust-streaming's consumer (aiokafka). Rebalances are *eager*: every
  member revokes every bucket, then gets a new set (round-robin: counts differ by at most one).
  A member expelled while frozen learns it at its next heartbeat and gets an ordinary revoke;
  its commits are then fenced by the checkpoint store.
* ``kafka``: a confluent-kafka consumer with the *cooperative-sticky* assignor. Only the buckets
  that move are revoked, so the others never stop; an expelled member gets ``lose`` at once.

cdcflow's offsets never go through the coordinator: faust's own offset commits have open bugs
(faust-streaming#606, #502) and the assignment topic has nothing to commit.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = ["EXIT_REVOKE_TIMEOUT", "BucketListener", "GroupCoordinator", "wait_or_exit"]

log = logging.getLogger("cdcflow.group")

EXIT_REVOKE_TIMEOUT = 70
"""The exit code of a worker that could not give its buckets back in time."""


class BucketListener(Protocol):
    """What a coordinator tells the worker. Called from the coordinator's own thread."""

    def assign(self, buckets: frozenset[int]) -> None:
        """These buckets are this worker's now. Returns at once; they start shortly."""

    def revoke(self, buckets: frozenset[int]) -> None:
        """Give these back: returns only once their partitions stopped, the sink was flushed and
        their checkpoints committed (the group waits for it before anyone else takes them)."""

    def lose(self, buckets: frozenset[int]) -> None:
        """The group already gave these to others: stop them at once, without a commit."""


class GroupCoordinator(ABC):
    """Joins the group's consumer group and reports bucket ownership to a listener."""

    @abstractmethod
    def start(self, listener: BucketListener) -> None:
        """Join the group (in the background)."""

    @abstractmethod
    def stop(self) -> None:
        """Leave the group. Called once the listener holds nothing any more."""

    @abstractmethod
    def owned(self) -> frozenset[int]:
        """The buckets the group gave this worker, as far as the coordinator knows."""

    @abstractmethod
    def alive(self) -> bool:
        """False once the coordinator has failed or stopped."""

    def is_leader(self) -> bool:
        """The leader lists source partitions for everyone: the owner of bucket 0."""
        return 0 in self.owned()


def wait_or_exit(
    events: Sequence[threading.Event], seconds: float, what: str, exit: Callable[[int], None] = os._exit
) -> None:
    """Wait for every event; past ``seconds``, end the process at once, without cleanup: a worker
    that could not give its buckets back in time must never write again."""
    until = time.monotonic() + seconds
    for event in events:
        if not event.wait(max(0.0, until - time.monotonic())):
            log.critical("%s did not finish within %.0f s: exiting so that nothing more is written", what, seconds)
            logging.shutdown()
            exit(EXIT_REVOKE_TIMEOUT)
