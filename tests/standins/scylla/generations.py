"""The stand-in's vnode CDC generations: what a ScyllaDB node knows and refuses, from its code.

:class:`TopologyDescription` is ``cdc::topology_description`` (seed 000, "The generation's
mapping"): entries sorted by ``token_range_end``, entry ``i`` covering the left-open range
``(end[i-1], end[i]]`` (entry 0 also takes everything past the last end: the ring wraps), with
one stream per shard of the range's owner. A token picks its range (scylladb ``cdc/metadata.cc``
lines 40-54, ``get_stream(entries, tok)``: lower_bound on ``token_range_end``, wrapping to entry
0), then the stream of the shard owning it (``dht::shard_of`` with the range's
``sharding_ignore_msb``).

:class:`CdcMetadata` is ``cdc::metadata``: the generations a node knows, by timestamp; the
generation with timestamp ``T`` operates in ``[T, T')``. :meth:`CdcMetadata.check_write` refuses
what ``cdc/metadata.cc`` ``get_vnode_stream()`` (lines 87-160) refuses.

:func:`make_new_generation_description` is ``cdc/generation.cc`` ``make_new_generation_description``
(lines 324-358, ``create_stream_ids`` lines 200-214): one entry per vnode, one stream per shard
whose token is that shard's first in the vnode.

Test machinery: the product does not import it. It uses the product only for ScyllaDB's public
formats (the stream-ID layout, ``stream_id``) and its token arithmetic (``tokens``).

Timestamps here are microseconds since the epoch (``api::timestamp_type``); generation timestamps
come from ``timestamp`` columns (milliseconds) and are multiplied by 1000.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.tokens import MAX_TOKEN, first_token_of_shard, shard_of
from tests.standins.scylla.errors import StandinSetupError, WriteRejectedError

__all__ = [
    "DEFAULT_GENERATION_LEEWAY_US",
    "CdcMetadata",
    "Generation",
    "TokenRangeDescription",
    "TopologyDescription",
    "make_new_generation_description",
    "split_ring",
]

DEFAULT_GENERATION_LEEWAY_US = 5_000_000
"""``generation_leeway``: "a small time-interval constant (e.g. 5 seconds)"."""


@dataclass(frozen=True, slots=True)
class TokenRangeDescription:
    """One entry of a topology description: the range ending at ``token_range_end`` and its streams,
    ``streams[j]`` being the stream of shard ``j`` of the range's owner."""

    token_range_end: int
    streams: tuple[StreamId, ...]
    sharding_ignore_msb: int = 0

    def __post_init__(self) -> None:
        if not self.streams:
            raise StandinSetupError(f"token range ending at {self.token_range_end} has no streams")


@dataclass(frozen=True, slots=True)
class TopologyDescription:
    """``cdc::topology_description``: the token-to-stream mapping of one generation."""

    entries: tuple[TokenRangeDescription, ...]
    _ends: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.entries:
            raise StandinSetupError("a topology description needs at least one token range")
        ends = tuple(e.token_range_end for e in self.entries)
        if any(a >= b for a, b in itertools.pairwise(ends)):
            raise StandinSetupError("token range ends must be strictly increasing")
        object.__setattr__(self, "_ends", ends)

    def entry_of(self, token: int) -> TokenRangeDescription:
        """The entry whose range holds ``token``: the first with ``token_range_end >= token``, or
        entry 0 for tokens past the last end (the wrapping range)."""
        index = bisect.bisect_left(self._ends, token)
        return self.entries[index if index < len(self.entries) else 0]

    def stream_of(self, token: int) -> StreamId:
        entry = self.entry_of(token)
        return entry.streams[shard_of(token, len(entry.streams), entry.sharding_ignore_msb)]

    def streams(self) -> Iterator[StreamId]:
        for entry in self.entries:
            yield from entry.streams


@dataclass(frozen=True, slots=True)
class Generation:
    """A generation: its timestamp (µs) and description; ``description`` is None while only the
    timestamp is known (``cdc::metadata::prepare``), and writes to it are refused."""

    timestamp_us: int
    description: TopologyDescription | None


@dataclass
class CdcMetadata:
    """``cdc::metadata``: the generations a node knows, by timestamp, and ``get_stream``."""

    generation_leeway_us: int = DEFAULT_GENERATION_LEEWAY_US
    _timestamps: list[int] = field(default_factory=list)
    _generations: dict[int, Generation] = field(default_factory=dict)

    def insert(self, timestamp_us: int, description: TopologyDescription) -> None:
        """Learn a generation (idempotent); replaces a prepared one with its description."""
        if timestamp_us not in self._generations:
            bisect.insort(self._timestamps, timestamp_us)
        self._generations[timestamp_us] = Generation(timestamp_us, description)

    def prepare(self, timestamp_us: int) -> None:
        """Learn only a generation's timestamp: writes that would use it are refused until
        :meth:`insert` brings its description."""
        if timestamp_us not in self._generations:
            bisect.insort(self._timestamps, timestamp_us)
            self._generations[timestamp_us] = Generation(timestamp_us, None)

    def generations(self) -> list[Generation]:
        return [self._generations[t] for t in self._timestamps]

    def operating_at(self, ts_us: int) -> Generation | None:
        """The generation whose interval ``[T, T')`` holds ``ts_us``; None before the first."""
        index = bisect.bisect_right(self._timestamps, ts_us) - 1
        return self._generations[self._timestamps[index]] if index >= 0 else None

    def interval_of(self, timestamp_us: int) -> tuple[int, int | None]:
        """``[T, T')`` of the generation with timestamp ``T``; ``T'`` None when no next one is known."""
        index = bisect.bisect_left(self._timestamps, timestamp_us)
        if index >= len(self._timestamps) or self._timestamps[index] != timestamp_us:
            raise KeyError(timestamp_us)
        following = self._timestamps[index + 1] if index + 1 < len(self._timestamps) else None
        return timestamp_us, following

    def check_write(self, write_ts_us: int, coordinator_now_us: int) -> None:
        """Raise :class:`WriteRejectedError` for a write ScyllaDB refuses ("accepting writes").

        With ``T`` the timestamp of the generation operating at the coordinator's time ``C``:
        a write at ``W >= T`` (current or next generation) needs ``W <= C + leeway``
        (``cdc/metadata.cc`` lines 89-100 refuse ``ts > now + leeway``); a write at ``W < T`` (a
        previous generation) needs ``W > C - leeway`` (lines 102-129: at or before ``now -
        leeway`` only the generation operating then, if still current, takes writes) and a
        generation operating at ``W`` (lines 131-136). A write whose generation is only prepared
        is refused too (lines 149-154).
        """
        leeway = self.generation_leeway_us
        current = self.operating_at(coordinator_now_us)
        if current is None:
            raise WriteRejectedError(f"no CDC generation operates at the coordinator's time {coordinator_now_us}")
        if write_ts_us >= current.timestamp_us:
            if write_ts_us > coordinator_now_us + leeway:
                raise WriteRejectedError(
                    f"write timestamp {write_ts_us} is too far in the future: at least the generation "
                    f"leeway ({leeway} µs) past the coordinator's clock {coordinator_now_us}"
                )
        else:
            if write_ts_us <= coordinator_now_us - leeway:
                raise WriteRejectedError(
                    f"write timestamp {write_ts_us} belongs to a previous generation and is more than "
                    f"the generation leeway ({leeway} µs) behind the coordinator's clock {coordinator_now_us}"
                )
            if self.operating_at(write_ts_us) is None:
                raise WriteRejectedError(f"no CDC generation operates at write timestamp {write_ts_us}")
        generation = self.operating_at(write_ts_us)
        if generation is not None and generation.description is None:
            raise WriteRejectedError(
                f"write timestamp {write_ts_us} falls into generation {generation.timestamp_us}, "
                "whose streams are not known yet"
            )

    def get_stream(self, ts_us: int, token: int) -> StreamId:
        """``cdc::metadata::get_stream``: the stream of ``token`` in the generation operating at ``ts_us``."""
        generation = self.operating_at(ts_us)
        if generation is None or generation.description is None:
            raise WriteRejectedError(f"no known CDC generation operates at {ts_us}")
        return generation.description.stream_of(token)


def make_new_generation_description(
    ring: Sequence[int],
    shard_count: int,
    sharding_ignore_msb: int,
    rng: random.Random,
) -> TopologyDescription:
    """A description refining the vnodes of ``ring`` (sorted vnode tokens): one entry per vnode,
    ending at its token, with one stream per shard whose token that shard owns inside the vnode
    (``cdc::make_new_generation_description``). When a vnode is too small to hold a token of some
    shard, that shard's stream takes the vnode's end token, as ScyllaDB's search does."""
    tokens = sorted(set(ring))
    if not tokens:
        raise StandinSetupError("a ring needs at least one vnode token")
    entries = []
    for index, end in enumerate(tokens):
        after = tokens[index - 1] if index > 0 else tokens[-1]
        if len(tokens) == 1:
            after = end  # one vnode: the whole ring
        streams = []
        for shard in range(shard_count):
            token = first_token_of_shard(after, end, shard, shard_count, sharding_ignore_msb)
            streams.append(
                StreamId.from_parts(end if token is None else token, rng.getrandbits(38), index & ((1 << 22) - 1))
            )
        entries.append(TokenRangeDescription(end, tuple(streams), sharding_ignore_msb))
    return TopologyDescription(tuple(entries))


def split_ring(vnodes: int, rng: random.Random) -> list[int]:
    """``vnodes`` random distinct tokens, as a node joining with ``num_tokens = vnodes`` picks them."""
    chosen: set[int] = set()
    while len(chosen) < vnodes:
        chosen.add(rng.randint(-MAX_TOKEN, MAX_TOKEN))
    return sorted(chosen)
