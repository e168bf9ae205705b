"""Where the commit-log readers say what they skipped or could not read: counters, log lines and the
error store (:mod:`.error_store`), each naming the node, segment and position."""

from __future__ import annotations

import logging
from pathlib import Path

from cdcflow.contract import PluginContext
from cdcflow.metrics import source_counter
from cdcflow.sources.cassandra_commitlog.cdc_index import CdcIndex
from cdcflow.sources.cassandra_commitlog.error_store import ErrorRecord, ErrorStore, KeptSegment, KeptSegmentInfo
from cdcflow.sources.cassandra_commitlog.exceptions import SegmentCutShortError
from cdcflow.sources.cassandra_commitlog.segment import SegmentRead

__all__ = ["MAX_ERROR_BYTES", "CommitLogReport"]

# Bytes kept per error-store record: a Cassandra blob must stay well under the mutation size limit;
# a segment with more unreadable bytes than this is kept whole (in ``unreadable_dir``).
MAX_ERROR_BYTES = 1 << 20


class CommitLogReport:
    """One node's counters (``cdcflow_source_*``), log and error store. ``error_store`` is set once
    the source is open; before, errors are only logged and counted."""

    def __init__(self, node: str, context: PluginContext, unreadable_dir: Path) -> None:
        self.node = node
        self.context = context
        self.unreadable_dir = unreadable_dir
        self.error_store: ErrorStore | None = None

    def counted(self, what: str, count: int = 1) -> None:
        source_counter(self.context.pipeline, what).inc(count)

    def store_error(self, segment_id: int, position: int, error: str, raw: bytes, level: int = logging.WARNING) -> None:
        self.counted("error_store_record")
        self.context.logger.log(
            level, "commit log %s segment %d position %d: %s", self.node, segment_id, position, error
        )
        if self.error_store is not None:
            self.error_store.save(ErrorRecord(self.node, segment_id, position, error, raw))

    def keep_cut_segment(self, segment_id: int, path: Path, data: bytes, index: CdcIndex, state: SegmentRead) -> None:
        """A segment cut short: kept whole with its index in the error store (before the offsets past
        it can be committed), logged, counted; the commit then moves the file aside
        (:meth:`.cdc_raw.CdcRawSegments.retire`)."""
        assert state.cut_at is not None
        error = SegmentCutShortError(
            f"segment cut short: the file has {len(data)} bytes, but its _cdc.idx says Cassandra synced it to "
            f"position {index.offset} and completed it; its entries were read to position {state.cut_at} and the "
            f"changes after that are missing. The segment and its index are kept in the error store "
            f"(cdcflow commitlog kept) and the file is moved to {self.unreadable_dir}",
            path,
            state.cut_at,
        )
        self.counted("segment_cut_short")
        if self.error_store is not None:
            info = KeptSegmentInfo(self.node, segment_id, path.name, len(data), index.text(), str(error))
            self.error_store.keep_segment(KeptSegment(info, data))
        self.store_error(segment_id, state.cut_at, str(error), b"", logging.ERROR)
