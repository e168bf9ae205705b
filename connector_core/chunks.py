"""Cutting a stream of items into lists of at most ``size``: the one helper for it.

The worker loop writes a read range to the sink ``engine.batch_size`` records at a time, and so do
the spark engine's tasks (both the source side, which routes rejected records per chunk, and a
generic sink's writes); Arrow batches, ScyllaDB's stream queries and the TiKV sorter's spilled
runs are cut the same way.
(``itertools.batched`` does this from Python 3.12 on, as tuples.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

__all__ = ["chunked"]

T = TypeVar("T")


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in order, as lists of ``size`` (the last one shorter); lazily, so an endless or a
    large iterator is read only as far as the chunks taken. ``size`` must be at least 1."""
    if size < 1:
        raise ValueError(f"a chunk holds at least one item, not {size}")
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
