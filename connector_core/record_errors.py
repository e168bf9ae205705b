"""What becomes of a record a stage rejected: ``errors.tolerance`` and ``errors.dead_letter``.

One place for the rule, used by the worker loop and by the Spark engine's tasks alike (Kafka
Connect keeps it in one package too: ``RetryWithToleranceOperator`` and its reporters):

* ``tolerance: none``: the first rejected record stops the pipeline (:class:`RecordFailedError`)
  before anything after it is committed;
* ``tolerance: all`` with a dead-letter sink: each rejected record goes there with headers saying
  where it came from and what was wrong (:func:`dead_letter_record`); a record the dead-letter sink
  refuses stops the pipeline, so nothing is lost on the way aside;
* ``tolerance: all`` with ``dead_letter: none`` (validation insists it is written out): the record
  is dropped and counted (``cdcflow_dropped_records``, and the run's last log line).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdcflow.contract import Rejected, Sink
from cdcflow.errors import CdcflowError, DeadLetterRefusedError
from cdcflow.events import Record

__all__ = [
    "DEAD_LETTER_STAGE_HEADER",
    "RecordFailedError",
    "RejectedRecordRouter",
    "dead_letter_record",
]

log = logging.getLogger("cdcflow.errors")

DEAD_LETTER_STAGE_HEADER = "cdcflow.error.stage"
"""Where a dead letter failed (``source``, ``transform:<type>``, ``convert``, ``sink``); every dead letter has it."""

_MESSAGE_LIMIT = 2000


class RecordFailedError(CdcflowError):
    """A record failed and ``errors.tolerance`` is ``none``: the pipeline stops before committing it."""

    def __init__(self, pipeline: str, rejected: Rejected) -> None:
        self.rejected = rejected
        super().__init__(
            f"pipeline {pipeline}: a record failed at {rejected.stage} ({type(rejected.error).__name__}: "
            f"{rejected.error}) and errors.tolerance is none; set errors.tolerance: all and "
            f"errors.dead_letter to route such records aside"
        )


def dead_letter_record(rejected: Rejected, pipeline: str) -> Record:
    """The rejected record, with headers saying where it failed, why, and where it came from.

    Kafka Connect's dead-letter headers (``__connect.errors.topic``, ``.partition``, ``.offset``,
    ``.exception.class.name``, ``.exception.message``) under cdcflow's prefix: every dead letter
    names its source partition and position; one read from Kafka also names the topic, partition
    and offset it was read at, each in a header of its own.
    """
    record = rejected.record
    headers = dict(record.headers or {})
    headers.update(
        {
            "cdcflow.error.pipeline": pipeline,
            DEAD_LETTER_STAGE_HEADER: rejected.stage,
            "cdcflow.error.class": type(rejected.error).__name__,
            "cdcflow.error.message": str(rejected.error)[:_MESSAGE_LIMIT],
            "cdcflow.error.original_topic": record.destination(),
            "cdcflow.error.source.partition": record.source.partition,
            "cdcflow.error.source.position": record.source.position_text(),
        }
    )
    read_from_kafka = record.source.extra.get("kafka")
    if isinstance(read_from_kafka, dict):
        for field in ("topic", "partition", "offset"):
            if field in read_from_kafka:
                headers[f"cdcflow.error.{field}"] = str(read_from_kafka[field])
    return record.with_changes(headers=headers, topic=None)


@dataclass
class RejectedRecordRouter:
    """Applies ``errors.tolerance`` and ``errors.dead_letter`` to rejected records.

    ``dead_letter`` returns the (open) dead-letter sink, or is None when the pipeline has none
    (``dead_letter: none``); it is called at the first rejected record, so an engine may build the
    sink lazily. ``counted(kind, n)`` is told of ``dead_lettered`` and ``dropped`` records.
    """

    pipeline: str
    tolerance: str
    dead_letter: Callable[[], Sink[Any]] | None
    counted: Callable[[str, int], None] = lambda kind, n: None
    dead_lettered: int = field(default=0, init=False)
    dropped: int = field(default=0, init=False)
    _unflushed: bool = field(default=False, init=False)  # dead letters written since the last flush

    def route(self, rejected: Sequence[Rejected]) -> None:
        """Stop on the first (tolerance none), or send aside (dead letters), or drop and count."""
        if not rejected:
            return
        if self.tolerance == "none":
            raise RecordFailedError(self.pipeline, rejected[0])
        first = rejected[0]
        # One line per batch, not per record: a poison table must not flood the log.
        log.warning(
            "pipeline %s: %d record(s) rejected; first at %s: %s: %s%s",
            self.pipeline,
            len(rejected),
            first.stage,
            type(first.error).__name__,
            first.error,
            "" if self.dead_letter is not None else " (dropped: errors.dead_letter is none)",
            extra={"pipeline": self.pipeline, "destination": first.record.destination()},
        )
        if self.dead_letter is None:
            self.dropped += len(rejected)
            self.counted("dropped", len(rejected))
            return
        refused = self.dead_letter().write([dead_letter_record(r, self.pipeline) for r in rejected])
        self._unflushed = True
        self.dead_lettered += len(rejected) - len(refused)
        self.counted("dead_lettered", len(rejected) - len(refused))
        if refused:
            raise DeadLetterRefusedError(
                f"pipeline {self.pipeline}: the dead-letter destination refused {len(refused)} records: "
                f"{refused[0].error}"
            ) from refused[0].error

    def flush(self) -> None:
        """Make every dead letter so far durable (before the records' offsets are committed)."""
        if self.dead_letter is None or not self._unflushed:
            return
        refused = self.dead_letter().flush()
        self._unflushed = False
        if refused:
            self.dead_lettered -= len(refused)
            raise DeadLetterRefusedError(
                f"pipeline {self.pipeline}: the dead-letter destination refused {len(refused)} records "
                f"at flush: {refused[0].error}"
            ) from refused[0].error

    def summary(self) -> str:
        """For the run's last log line: what went aside and what was dropped."""
        return f"{self.dead_lettered} sent to the dead letters, {self.dropped} dropped"
