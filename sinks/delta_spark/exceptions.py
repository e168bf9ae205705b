"""Everything the ``delta`` sink raises, under :class:`cdcflow.errors.SinkError`."""

from __future__ import annotations

from cdcflow.errors import SinkError

__all__ = [
    "DeltaAppIdReusedError",
    "DeltaSchemaConflictError",
    "DeltaSinkError",
    "MirrorUnsupportedChangeError",
]


class DeltaSinkError(SinkError):
    """The family of the ``delta`` sink's errors."""


class DeltaSchemaConflictError(DeltaSinkError):
    """A column's values need a type the Delta table's column cannot hold, and Delta cannot widen it
    in place (the message names both types and the tables they come from)."""


class MirrorUnsupportedChangeError(DeltaSinkError):
    """A change the mirror cannot apply to the row it keeps without guessing (a list element removed
    or set by its position: the log names it by a cell id the mirror does not store)."""


class DeltaAppIdReusedError(DeltaSinkError):
    """The table already holds later micro-batches of this pipeline's transaction id than the query
    is at: the query's checkpoint is not the one that wrote the table, and Delta would skip its
    batches as already written."""
