"""cdcflow.chunks.chunked: the one way a stream of records is cut into batches (the worker loop,
the spark engine's tasks, Arrow batches, ScyllaDB's stream queries)."""

from __future__ import annotations

import itertools

import pytest

from cdcflow.chunks import chunked
from cdcflow.sources.scylla_cdc.log_reader import stream_chunks


@pytest.mark.parametrize(("count", "size"), [(0, 3), (1, 3), (6, 3), (7, 3), (7, 1), (5, 10)])
def test_chunks_keep_order_and_hold_at_most_size(count: int, size: int) -> None:
    chunks = list(chunked(range(count), size))
    assert [item for chunk in chunks for item in chunk] == list(range(count))
    assert all(len(chunk) == size for chunk in chunks[:-1])
    assert all(1 <= len(chunk) <= size for chunk in chunks)
    assert len(chunks) == -(-count // size)


def test_an_endless_stream_is_read_only_as_far_as_the_chunks_taken() -> None:
    read = []
    endless = (read.append(n) or n for n in itertools.count())
    assert list(itertools.islice(chunked(endless, 4), 2)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert read == list(range(8))


def test_a_chunk_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one item, not 0"):
        next(chunked([1], 0))


def test_scylla_queries_take_near_equal_chunks_of_streams() -> None:
    streams = [bytes([n]) for n in range(250)]
    assert [len(c) for c in stream_chunks(streams, 100)] == [84, 84, 82]
    assert stream_chunks([], 100) == [[]]  # one (empty) query still answers for the window
