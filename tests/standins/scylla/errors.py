"""What the ScyllaDB stand-in refuses: its own errors, not the product's (test machinery)."""

from __future__ import annotations

__all__ = ["StandinSetupError", "WriteRejectedError"]


class StandinSetupError(ValueError):
    """A stand-in cluster set up in a way ScyllaDB never is (an empty ring, unsorted ranges, a
    stream-set change that closes streams that are not current)."""


class WriteRejectedError(Exception):
    """A write ScyllaDB's coordinator refuses (scylladb ``cdc/metadata.cc`` get_vnode_stream() and
    get_tablet_stream_set(): a timestamp too far in the future or the past for the known CDC
    generations or stream sets)."""
