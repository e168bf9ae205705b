"""How the Spark engine reports the way a streaming query ended: a failure is an error unless the
pipeline was asked to stop, whose signal can reach Spark's JVM and end the running batch too."""

from __future__ import annotations

import logging
import threading

import pytest

from cdcflow.errors import EngineError
from cdcflow.spark_engine.runner import raise_query_failure


class EndedQuery:
    """What ``raise_query_failure`` asks of a ``StreamingQuery``: how it ended."""

    def __init__(self, failure: Exception | None = None, jvm_gone: bool = False) -> None:
        self.failure, self.jvm_gone = failure, jvm_gone

    def exception(self) -> Exception | None:
        if self.jvm_gone:
            raise ConnectionRefusedError("the Py4J gateway is closed")
        return self.failure


def stop_requested(requested: bool) -> threading.Event:
    stop = threading.Event()
    if requested:
        stop.set()
    return stop


def test_a_failure_without_a_stop_request_is_an_engine_error_with_spark_s_message() -> None:
    query = EndedQuery(RuntimeError("[STREAM_FAILED] the batch's task failed 4 times"))
    with pytest.raises(EngineError, match=r"pipeline p: the Spark query failed: \[STREAM_FAILED\] the batch"):
        raise_query_failure(query, "p", stop_requested(False))


def test_a_failure_ending_a_stop_request_is_a_clean_stop_logged_with_the_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    query = EndedQuery(RuntimeError("[STREAM_FAILED] Query terminated with exception\n  at ...scala"))
    with caplog.at_level(logging.WARNING, logger="cdcflow.spark"):
        raise_query_failure(query, "p", stop_requested(True))
    assert [r.getMessage() for r in caplog.records] == [
        "pipeline p: the Spark query ended with the stop signal ([STREAM_FAILED] Query terminated with "
        "exception); any unfinished batch re-runs at the next start"
    ]


def test_a_query_that_ended_cleanly_raises_nothing_either_way() -> None:
    for requested in (False, True):
        raise_query_failure(EndedQuery(None), "p", stop_requested(requested))


def test_a_jvm_gone_is_an_error_unless_a_stop_was_requested() -> None:
    with pytest.raises(ConnectionRefusedError):
        raise_query_failure(EndedQuery(jvm_gone=True), "p", stop_requested(False))
    raise_query_failure(EndedQuery(jvm_gone=True), "p", stop_requested(True))
