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

Where a record failed is its *stage* (:data:`SOURCE_STAGE`, :func:`transform_stage`,
:data:`CONVERT_STAGE`, :data:`SINK_STAGE`), in the dead letter's ``cdcflow.error.stage`` header.
The worker loop keeps one :class:`RejectedRecordRouter` for a run, its dead-letter sink opened
with the pipeline's; a Spark task builds its own with :func:`task_rejections`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cdcflow.contract import Rejected, Sink
from cdcflow.errors import CdcflowError, DeadLetterRefusedError
from cdcflow.events import Record

__all__ = [
    "CONVERT_STAGE",
    "DEAD_LETTER_STAGE_HEADER",
    "SINK_STAGE",
    "SOURCE_STAGE",
    "RecordFailedError",
    "RejectedRecordRouter",
    "dead_letter_record",
    "task_rejections",
    "transform_stage",
]

log = logging.getLogger("cdcflow.errors")

DEAD_LETTER_STAGE_HEADER = "cdcflow.error.stage"
"""Where a dead letter failed (``source``, ``transform:<type>``, ``convert``, ``sink``); every dead letter has it."""

SOURCE_STAGE = "source"
"""The source could not make a record of what it read (an undecodable message or log row)."""
CONVERT_STAGE = "convert"
"""A sink's converter could not encode the record (a value its schema cannot hold)."""
SINK_STAGE = "sink"
"""The destination refused the record for good (too large, an invalid key)."""


def transform_stage(type_name: str) -> str:
    """The stage of a record the transform of type ``type_name`` failed on."""
    return f"transform:{type_name}"


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


@contextmanager
def task_rejections(
    pipeline: str, tolerance: str, build_dead_letter: Callable[[], Sink[Any]] | None
) -> Iterator[RejectedRecordRouter]:
    """The router of one engine task that owns its dead-letter sink (a Spark task, in whichever
    process runs it): the sink is built and opened at the task's first rejected record (most
    tasks have none), its dead letters flushed once the task's records are through, before the
    task succeeds (a task that fails is run again, dead letters and all), and it is closed in any
    case. What the task dropped is logged: an executor has no metrics port."""
    opened: list[Sink[Any]] = []

    def dead_letter() -> Sink[Any]:
        if not opened:
            assert build_dead_letter is not None
            opened.append(build_dead_letter())
            opened[0].open()
        return opened[0]

    router = RejectedRecordRouter(pipeline, tolerance, None if build_dead_letter is None else dead_letter)
    try:
        yield router
        router.flush()
        if router.dropped:
            log.warning("pipeline %s: this task %s", pipeline, router.summary())
    finally:
        for sink in opened:
            sink.close()
