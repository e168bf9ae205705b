"""Which stream groups a group replaces (sources/scylla_cdc/successors.py), against the design's
token rules written out here: a vnode range ``(end[i-1], end[i]]`` with tokens past the last end in
the first range (seed 000; scylladb ``cdc/metadata.cc`` 40-54), a tablet stream taking the tokens
up to its own from the stream before it (seed 004; ``cdc/metadata.cc`` 56-69)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from cdcflow.sources.scylla_cdc.metadata import StreamRange
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.successors import overlapping_ranges, tablet_predecessors, vnode_predecessors
from cdcflow.sources.scylla_cdc.tokens import MAX_TOKEN, MIN_TOKEN

tokens = st.integers(min_value=MIN_TOKEN, max_value=MAX_TOKEN)
cuts = st.lists(tokens, min_size=1, max_size=12, unique=True).map(sorted)


def intervals(ends: list[int], k: int) -> list[tuple[int, int]]:
    """Range ``k`` of a cut as closed intervals of tokens."""
    if k > 0:
        return [(ends[k - 1] + 1, ends[k])]
    wrapped = [(ends[-1] + 1, MAX_TOKEN)] if ends[-1] < MAX_TOKEN else []
    return [(MIN_TOKEN, ends[0]), *wrapped]


def share_a_token(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(max(lo1, lo2) <= min(hi1, hi2) for lo1, hi1 in a for lo2, hi2 in b)


@given(cuts, cuts)
def test_overlapping_ranges_are_the_pairs_that_share_a_token(before: list[int], after: list[int]) -> None:
    expected = {
        (i, j)
        for i in range(len(before))
        for j in range(len(after))
        if share_a_token(intervals(before, i), intervals(after, j))
    }
    assert overlapping_ranges(before, after) == expected


def stream(token: int, rng: random.Random) -> StreamId:
    return StreamId.from_parts(token, rng.getrandbits(38), 0)


def test_vnode_predecessors_by_range_and_everything_without_range_ends() -> None:
    rng = random.Random(1)
    previous = [StreamRange(f"r{e}", (stream(e, rng),), e) for e in (-100, 0, 100)]
    # A node joined: its tokens -50 and 150 cut (-100, 0] and the wrapping range (100, -100].
    current = [StreamRange(f"r{e}", (stream(e, rng),), e) for e in (-100, -50, 0, 100, 150)]
    assert vnode_predecessors(previous, current) == {
        "r-100": ("r-100",),
        "r-50": ("r0",),
        "r0": ("r0",),
        "r100": ("r100",),
        "r150": ("r-100",),
    }
    v1 = [StreamRange(f"v{i}", (stream(i, rng),)) for i in range(2)]
    assert vnode_predecessors(v1, current[:2]) == {"r-100": ("v0", "v1"), "r-50": ("v0", "v1")}


def tablet_streams(count: int, rng: random.Random) -> list[StreamId]:
    """A set of ``count`` tablets as seed 004 lays them out: tablet ``i`` ends at the token
    ``MIN + (i + 1) * 2**64 / count - 1``."""
    width = (1 << 64) // count
    return [stream(MIN_TOKEN + (i + 1) * width - 1, rng) for i in range(count)]


def test_tablet_predecessors_across_a_merge_and_a_split() -> None:
    rng = random.Random(2)
    first, merged, split = tablet_streams(4, rng), tablet_streams(2, rng), tablet_streams(8, rng)
    lifetimes = [
        *((s, 1000, 2000) for s in first),
        *((s, 2000, 3000) for s in merged),
        *((s, 3000, None) for s in split),
    ]
    found = tablet_predecessors(lifetimes)
    assert set(found) == {*merged, *split}
    # Merged tablet j covers tablets 2j and 2j+1 of four; split tablet j of eight lies in tablet j // 4 of two.
    assert {s: set(found[s]) for s in merged} == {merged[j]: {first[2 * j], first[2 * j + 1]} for j in range(2)}
    assert {s: set(found[s]) for s in split} == {split[j]: {merged[j // 4]} for j in range(8)}


@given(st.data())
def test_a_tokens_old_stream_is_a_predecessor_of_its_new_one(data: st.DataObject) -> None:
    rng = random.Random(data.draw(st.integers(0, 1000)))
    old_tokens = data.draw(cuts)
    new_tokens = data.draw(cuts)
    if old_tokens[-1] != MAX_TOKEN:
        old_tokens.append(MAX_TOKEN)  # a tablet set's last stream ends the ring
    if new_tokens[-1] != MAX_TOKEN:
        new_tokens.append(MAX_TOKEN)
    old = [stream(t, rng) for t in old_tokens]
    kept = data.draw(st.sets(st.sampled_from(range(len(old)))))
    by_token = {s.token: s for i, s in enumerate(old) if i in kept}
    new = [by_token.get(t) or stream(t, rng) for t in new_tokens]  # a kept stream keeps its ID
    lifetimes = [(s, 10, None if s in new else 20) for s in old] + [(s, 20, None) for s in new if s not in old]
    found = tablet_predecessors(lifetimes)
    for token in data.draw(st.lists(tokens, min_size=1, max_size=20)):
        before = next(s for s in old if s.token >= token)
        after = next(s for s in new if s.token >= token)
        if after not in old:
            assert before in found[after]
