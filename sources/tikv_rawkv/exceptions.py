"""Every way the ``tikv_rawkv`` source fails, under cdcflow's exception tree (the client's own
errors are in :mod:`cdcflow.sources.tikv_client.exceptions`).

::

    SourceError
    ├── CheckpointBehindGCSafePointError            the checkpoint's versions may be garbage-collected
    ├── FeedRefusedError                            TiKV refused the change feed for good
    ├── PartitionLayoutError                        the partition map file disagrees with the config
    └── RowRejectedError (SourceDataError)          a feed row that is not a RawKV change (dead letters)
"""

from __future__ import annotations

from cdcflow.errors import SourceDataError, SourceError

__all__ = ["CheckpointBehindGCSafePointError", "FeedRefusedError", "PartitionLayoutError", "RowRejectedError"]


class CheckpointBehindGCSafePointError(SourceError):
    """The partition would resume below the cluster's GC safepoint: changes may already be gone."""


class FeedRefusedError(SourceError):
    """TiKV refused a subscription with an error no retry cures: not API V2 (``compatibility``),
    another cluster (``cluster_id_mismatch``), or a region registered twice (``duplicate_request``)."""


class PartitionLayoutError(SourceError):
    """The stored partition map does not fit the configured key range or keyspace."""


class RowRejectedError(SourceDataError):
    """A row in the change feed that is not a RawKV change this source can pass on."""
