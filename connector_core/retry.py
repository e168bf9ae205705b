"""Exponential backoff with jitter, bounded in delay and in total time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cdcflow.config import RetryConfig
from cdcflow.errors import RetriesExhaustedError

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Tracks one run of consecutive failures and says how long to wait before the next try.

    Delays grow from ``initial_backoff_ms`` by ``multiplier`` up to ``max_backoff_ms``; each is
    shortened by a random fraction up to ``jitter`` so that many workers hitting the same broker do
    not retry in lockstep. :meth:`next_delay` raises :class:`RetriesExhaustedError` once failures
    have lasted ``max_elapsed_s``. :meth:`succeeded` starts a fresh run.
    """

    policy: RetryConfig
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0
    first_failure_at: float | None = None

    def next_delay(self, operation: str, error: BaseException) -> float:
        now = self.clock()
        if self.first_failure_at is None:
            self.first_failure_at = now
        self.attempts += 1
        limit = self.policy.max_elapsed_s
        if limit is not None and now - self.first_failure_at >= limit:
            raise RetriesExhaustedError(operation, self.attempts, error) from error
        ceiling = min(
            self.policy.max_backoff_ms,
            self.policy.initial_backoff_ms * self.policy.multiplier ** (self.attempts - 1),
        )
        delay_ms = ceiling * (1.0 - self.policy.jitter * self.rng.random())
        if limit is not None:
            # Never sleep past the deadline: the last try happens at it, not after it.
            delay_ms = min(delay_ms, max(0.0, limit - (now - self.first_failure_at)) * 1000)
        return delay_ms / 1000.0

    def succeeded(self) -> None:
        self.attempts = 0
        self.first_failure_at = None
