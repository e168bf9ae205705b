"""Backoff: exponential growth, jitter within bounds, a deadline it never sleeps past."""

from __future__ import annotations

import random

import pytest

from cdcflow.config import RetryConfig
from cdcflow.errors import RetriesExhaustedError, SourceUnavailableError
from cdcflow.retry import Backoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_delays_grow_by_the_multiplier_up_to_the_ceiling_within_the_jitter() -> None:
    policy = RetryConfig(initial_backoff_ms=100, max_backoff_ms=1000, multiplier=2.0, jitter=0.25, max_elapsed_s=None)
    clock = FakeClock()
    backoff = Backoff(policy, clock=clock, rng=random.Random(1))
    error = SourceUnavailableError("down")
    ceilings = [100, 200, 400, 800, 1000, 1000, 1000]
    for ceiling in ceilings:
        delay = backoff.next_delay("op", error)
        assert ceiling * 0.75 / 1000 <= delay <= ceiling / 1000
        clock.now += delay


def test_gives_up_after_max_elapsed_and_never_sleeps_past_it() -> None:
    policy = RetryConfig(initial_backoff_ms=400, max_backoff_ms=400, jitter=0.0, max_elapsed_s=1.0)
    clock = FakeClock()
    backoff = Backoff(policy, clock=clock, rng=random.Random(2))
    error = SourceUnavailableError("down")
    slept = []
    with pytest.raises(RetriesExhaustedError) as caught:
        while True:
            delay = backoff.next_delay("write", error)
            slept.append(delay)
            clock.now += delay
    assert slept == [0.4, 0.4, pytest.approx(0.2)]  # the last wait ends exactly at the deadline
    assert caught.value.attempts == 4 and caught.value.last is error


def test_success_starts_a_fresh_run() -> None:
    policy = RetryConfig(initial_backoff_ms=100, max_backoff_ms=10_000, jitter=0.0, max_elapsed_s=None)
    backoff = Backoff(policy, clock=FakeClock(), rng=random.Random(3))
    error = SourceUnavailableError("down")
    assert [backoff.next_delay("op", error) for _ in range(3)] == [0.1, 0.2, 0.4]
    backoff.succeeded()
    assert backoff.next_delay("op", error) == 0.1
