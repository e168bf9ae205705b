"""Every way the TiKV client fails, under cdcflow's exception tree.

::

    TiKVClientError (CdcflowError)
    ├── TiKVUnavailableError (TransientError)        PD or a store cannot be reached
    ├── RegionErrorsExhaustedError (TransientError)  region errors outlived the client's backoff
    ├── TiKVServerError                              TiKV refused a request for good (its ``error`` text)
    ├── RegionNotInPDError (TransientError)          PD's region tree has a hole at the key (a split not reported yet)
    ├── StoreNotFoundError (TransientError)          PD no longer serves a store a region was routed to (purged)
    ├── PDError (ProtocolError)                      PD answered with an error header
    └── CodecError (ProtocolError)
        ├── KeyDecodeError                           bytes that are not a key of the expected form
        └── ValueDecodeError                         a stored value whose meta byte cannot be read
"""

from __future__ import annotations

from cdcflow.errors import CdcflowError, ProtocolError, TransientError

__all__ = [
    "CodecError",
    "KeyDecodeError",
    "PDError",
    "RegionErrorsExhaustedError",
    "RegionNotInPDError",
    "StoreNotFoundError",
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


class RegionNotInPDError(TiKVClientError, TransientError):
    """PD holds no region for a key: its region tree has a hole there until the region's leader
    reports (after a split, before both halves' heartbeats); asked again, it fills in."""


class StoreNotFoundError(TiKVClientError, TransientError):
    """PD no longer serves a store (removed after a purge, or a tombstone): the regions routed
    there are looked up in PD again, and lead elsewhere by now."""


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
