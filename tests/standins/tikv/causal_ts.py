"""A TiKV store's causal timestamp provider (API V2): PD timestamps cached in batches.

tikv/tikv ``components/causal_ts/src/tso.rs`` (at 8e964719) ``BatchTsoProvider``: a store does
not ask PD for each RawKV write's timestamp. Every ``renew_interval`` (100 ms, tso.rs:57) it asks
PD for a batch of ``usage x cache_multiplier - remain`` timestamps (at least 100, at most 8192,
tso.rs:59-64, ``calc_new_batch_size``), where ``cache_multiplier`` = alloc-ahead-buffer (3 s,
tso.rs:70) / renew interval = 30, which is also how many batches the list keeps (``push`` drops
the oldest beyond it). A timestamp is popped from the *oldest* batch that has one left
(``TsoBatchList::pop``), so on an idle store writes and resolved-ts carry timestamps PD handed out
up to 3 s earlier: behind PD's own "now". A batch is the ``count`` timestamps ending at the one PD
returned (``TsoBatch::new``). ``flush`` drops every cached batch and takes a fresh one
(``renew_tso_batch(need_flush = true)``); raftstore calls it when a region's leadership or a
merge lands on the store (``components/raftstore/src/store/worker/pd.rs:2175-2190``,
``handle_update_max_timestamp``), so the new leader's next timestamp is above anything the store
that led before could have handed out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

RENEW_INTERVAL_S = 0.1  # tso.rs:57 DEFAULT_TSO_BATCH_RENEW_INTERVAL_MS
BATCH_MIN_SIZE = 100  # tso.rs:59 DEFAULT_TSO_BATCH_MIN_SIZE
BATCH_MAX_SIZE = 8192  # tso.rs:64 DEFAULT_TSO_BATCH_MAX_SIZE
ALLOC_AHEAD_BUFFER_S = 3.0  # tso.rs:70 DEFAULT_TSO_BATCH_ALLOC_AHEAD_BUFFER_MS
CACHE_MULTIPLIER = round(ALLOC_AHEAD_BUFFER_S / RENEW_INTERVAL_S)  # calc_cache_multiplier: 30


@dataclass
class _Batch:
    next: int  # the next timestamp to hand out
    end: int  # exclusive


class CausalTsProvider:
    """One store's cache of PD timestamps. ``pd_tso(count)`` returns the last of ``count`` fresh
    timestamps PD allocated (the ``Tso`` call with ``count``)."""

    def __init__(self, pd_tso: Callable[[int], int]) -> None:
        self._pd_tso = pd_tso
        self._lock = threading.Lock()
        self._batches: list[_Batch] = []
        self._usage = 0  # timestamps handed out since the last renew (tso_usage)
        self.flushes = 0
        self._renew(need_flush=True)  # BatchTsoProvider::init renews with need_flush

    def get_ts(self) -> int:
        """``async_get_ts``: from the oldest batch with one left; renew first when none has."""
        with self._lock:
            for _ in range(2):
                for batch in self._batches:
                    if batch.next < batch.end:
                        ts = batch.next
                        batch.next += 1
                        self._usage += 1
                        return ts
                self._renew_locked(need_flush=False)
            raise AssertionError("a renewed batch list has no timestamp")

    def renew(self) -> None:
        """The background renew of every ``renew_interval``."""
        self._renew(need_flush=False)

    def flush(self) -> int:
        """Drops the cached batches and takes a fresh one; returns the first timestamp it holds."""
        with self._lock:
            self.flushes += 1
            self._renew_locked(need_flush=True)
            return self._batches[0].next

    def _renew(self, need_flush: bool) -> None:
        with self._lock:
            self._renew_locked(need_flush)

    def _renew_locked(self, need_flush: bool) -> None:
        remain = sum(b.end - b.next for b in self._batches)
        size = self._usage * CACHE_MULTIPLIER
        if not need_flush:
            size = max(0, size - remain)
        size = min(max(size, BATCH_MIN_SIZE), BATCH_MAX_SIZE)
        last = self._pd_tso(size)
        if need_flush:
            self._batches.clear()
        self._batches.append(_Batch(last - size + 1, last + 1))
        while len(self._batches) > CACHE_MULTIPLIER:
            self._batches.pop(0)
        self._batches = [b for b in self._batches if b.next < b.end]
        self._usage = 0  # take_and_report_usage after a successful renew
