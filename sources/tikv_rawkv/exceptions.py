"""Every way the TiKV RawKV client, source and sink fail, under cdcflow's exception tree.

::

    TiKVClientError (CdcflowError)
    ├── TiKVUnavailableError (TransientError)        PD or a store cannot be reached
    ├── RegionErrorsExhaustedError (TransientError)  region errors outlived the client's backoff
    ├── TiKVServerError                              TiKV refused a request for good (its ``error`` text)
    ├── PDError (ProtocolError)                      PD answered with an error header
    └── CodecError (ProtocolError)
        ├── KeyDecodeError                           bytes that are not a key of the expected form
        └── ValueDecodeError                         a stored value whose meta byte cannot be read
    SourceError
    ├── CheckpointBehindGCSafePointError            the checkpoint's versions may be garbage-collected
    ├── PartitionLayoutError                        the partition map file disagrees with the config
    └── RowRejectedError (SourceDataError)          a feed row that is not a RawKV change (dead letters)
"""

from __future__ import annotations

from connector_core.errors import CdcflowError, ProtocolError, SourceDataError, SourceError, TransientError

__all__ = [
    "CheckpointBehindGCSafePointError",
    "CodecError",
    "KeyDecodeError",
    "PDError",
    "PartitionLayoutError",
    "RegionErrorsExhaustedError",
    "RowRejectedError",
    "TiKVClientError",
    "TiKVServerError",
    "TiKVUnavailableError",
    "ValueDecodeError",
]


class TiKVClientError(CdcflowError):
    """The PD/TiKV client failed."""


class TiKVUnavailableError(TiKVClientError, TransientError):
    """PD or a TiKV store cannot be reached (connection refused, deadline exceeded)."""


class RegionErrorsExhaustedError(TiKVClientError, TransientError):
    """A request kept meeting region errors (not leader, epoch mismatch, busy) past its backoff budget."""


class TiKVServerError(TiKVClientError):
    """TiKV refused a request with an error no retry cures (its ``error`` field)."""


class PDError(TiKVClientError, ProtocolError):
    """PD answered with an error in its response header."""


class CodecError(TiKVClientError, ProtocolError):
    """Bytes that do not follow the API V2 encoding."""

    def __init__(self, data: bytes, reason: str) -> None:
        self.data = data
        shown = data[:64].hex() + ("..." if len(data) > 64 else "")
        super().__init__(f"{reason}: {shown}")


class KeyDecodeError(CodecError):
    """A key that is not of the expected form (memcomparable groups, keyspace prefix, timestamp)."""


class ValueDecodeError(CodecError):
    """A stored RawKV value whose trailing meta byte or expire time cannot be read."""


class CheckpointBehindGCSafePointError(SourceError):
    """The partition would resume below the cluster's GC safepoint: changes may already be gone."""


class PartitionLayoutError(SourceError):
    """The stored partition map does not fit the configured key range or keyspace."""


class RowRejectedError(SourceDataError):
    """A row in the change feed that is not a RawKV change this source can pass on."""
