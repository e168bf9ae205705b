"""Every way the ``kafka`` sink refuses a record for good, under cdcflow's exception tree.

::

    SinkError
    └── RecordRejectedError
        └── TombstoneWithheldError      the tombstone after a delete Kafka refused (dead letters)
"""

from __future__ import annotations

from cdcflow.errors import RecordRejectedError

__all__ = ["TombstoneWithheldError"]


class TombstoneWithheldError(RecordRejectedError):
    """The tombstone that would have followed a delete Kafka refused for good. It was not written:
    a compacted topic would forget a key whose delete never arrived. It goes to the dead letters
    right after its delete, carrying the ``cdcflow.tombstone`` header."""
