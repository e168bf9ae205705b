"""Every way the ``kafka`` sink refuses records, under cdcflow's exception tree.

::

    SinkError
    ├── RecordRejectedError
    │   └── TombstoneWithheldError      the tombstone after a delete Kafka refused (dead letters)
    └── RecordRefusedInTransactionError Kafka refused a record inside an exactly-once transaction
"""

from __future__ import annotations

from cdcflow.errors import RecordRejectedError, SinkError

__all__ = ["RecordRefusedInTransactionError", "TombstoneWithheldError"]


class TombstoneWithheldError(RecordRejectedError):
    """The tombstone that would have followed a delete Kafka refused for good. It was not written:
    a compacted topic would forget a key whose delete never arrived. It goes to the dead letters
    right after its delete, carrying the ``cdcflow.tombstone`` header."""


class RecordRefusedInTransactionError(SinkError):
    """With ``delivery: exactly_once``, the broker refused a record (too large for its topic, say):
    librdkafka fails the whole produce request and marks the transaction for abort, so the record
    cannot be set aside while the others commit. Not retried (the replay would be refused again):
    the pipeline stops, nothing of the interval is visible, and the message says what to change."""
