"""Which stream groups a stream group replaces: a key's changes move from one to the other at a
generation switch (vnodes) or a tablet resize, and the engines keep their order by reading the
successor only once its predecessors are complete up to its start (``cdcflow.succession``).

A key's stream is picked by its token: in a vnode generation, the range ``(end[i-1], end[i]]``
holding it, tokens past the last end wrapping to the first range (scylladb ``cdc/metadata.cc``
lines 40-54, ``get_stream``: ``lower_bound`` on ``token_range_end``, else ``entries.begin()``); in a
tablet stream set, the first stream whose token (its tablet's last token) is at or past it (lines
56-69). Both are ranges of a ring cut at sorted end tokens, so a successor range takes keys from
exactly the predecessor ranges it overlaps. ScyllaDB's own consumers read one generation at a
time (scylla-cdc-java, -go, -rust), and ScyllaDB blocks tablet merges under Alternator because a
merged stream has two parents that "both need to be done reading from before reading from the
newly merged tablet" (``cdc/cdc_options.hh`` lines 36-43).

A v1 generation description gives no range ends: every range of the previous generation is then a
predecessor of every range of the next.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from cdcflow.sources.scylla_cdc.metadata import StreamRange
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.tokens import MAX_TOKEN

__all__ = ["overlapping_ranges", "tablet_predecessors", "vnode_predecessors"]


def _range_of(ends: Sequence[int], token: int) -> int:
    index = bisect.bisect_left(ends, token)
    return index if index < len(ends) else 0  # past the last end: the first range (the ring wraps)


def overlapping_ranges(before: Sequence[int], after: Sequence[int]) -> set[tuple[int, int]]:
    """The pairs ``(i, j)`` of a range of ``before`` and a range of ``after`` sharing a token, for
    two cuts of the ring given by their sorted end tokens (range ``k`` is ``(end[k-1], end[k]]``,
    range 0 also every token past the last end).

    Between two consecutive ends of either cut every token lies in one range of each, that of the
    upper end; past the last end of both, range 0 of each."""
    cuts = sorted(set(before) | set(after))
    pairs = {(_range_of(before, end), _range_of(after, end)) for end in cuts}
    if cuts and cuts[-1] < MAX_TOKEN:
        pairs.add((0, 0))
    return pairs


def vnode_predecessors(previous: Sequence[StreamRange], current: Sequence[StreamRange]) -> dict[str, tuple[str, ...]]:
    """For each range key of generation ``current``, the range keys of the generation before it
    (``previous``) that held some of its tokens."""
    before = [r.range_end for r in previous]
    after = [r.range_end for r in current]
    if not before or not after or None in before or None in after:
        every = tuple(r.key for r in previous)
        return {r.key: every for r in current}
    before_ends = sorted((end, r.key) for end, r in zip(before, previous, strict=True) if end is not None)
    after_ends = sorted((end, r.key) for end, r in zip(after, current, strict=True) if end is not None)
    found: dict[str, set[str]] = {key: set() for _, key in after_ends}
    for i, j in overlapping_ranges([e for e, _ in before_ends], [e for e, _ in after_ends]):
        found[after_ends[j][1]].add(before_ends[i][1])
    return {key: tuple(sorted(keys)) for key, keys in found.items()}


def tablet_predecessors(
    lifetimes: Sequence[tuple[StreamId, int, int | None]],
) -> dict[StreamId, tuple[StreamId, ...]]:
    """For each stream opened after a table's first stream set, the streams of the set operating
    just before it opened whose token ranges overlap its own (``lifetimes``: each stream with its
    ``[opened, closed)``). A stream kept across a resize is no predecessor of itself."""
    found: dict[StreamId, tuple[StreamId, ...]] = {}
    openings = sorted({opened for _, opened, _ in lifetimes})
    for opened_at in openings[1:]:
        before = _set_at(lifetimes, opened_at - 1)
        after = _set_at(lifetimes, opened_at)
        if not before:
            continue
        parents: dict[StreamId, set[StreamId]] = {}
        for i, j in overlapping_ranges([s.token for s in before], [s.token for s in after]):
            if before[i] != after[j]:
                parents.setdefault(after[j], set()).add(before[i])
        for stream, opened, _ in lifetimes:
            if opened == opened_at and stream in parents:
                found[stream] = tuple(sorted(parents[stream], key=lambda s: (s.token, s.raw)))
    return found


def _set_at(lifetimes: Sequence[tuple[StreamId, int, int | None]], ts_us: int) -> list[StreamId]:
    """The streams operating at ``ts_us``, by token."""
    alive = [s for s, opened, closed in lifetimes if opened <= ts_us and (closed is None or ts_us < closed)]
    return sorted(alive, key=lambda s: (s.token, s.raw))
