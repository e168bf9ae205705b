"""A stopped Spark query's offsets, read from and written to its checkpoint folder.

Spark keeps a query's progress in two logs under the checkpoint location: ``offsets/<batch>``
(a version line, the batch's metadata, then one line per source with the offsets the batch ends
at) and ``commits/<batch>`` (written once the batch's output is durable). A restarted query
whose newest offsets batch is also committed starts the next batch from those offsets. Changing
offsets therefore means appending one more batch to both logs, as if an empty batch had ended at
the new offsets; earlier batches stay as Spark wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cdcflow.checkpoints import write_file_atomically
from cdcflow.errors import CheckpointCorruptError

__all__ = ["append_committed_batch", "last_committed_batch"]


def _batches(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("*") if p.name.isdigit()) if folder.is_dir() else []


def last_committed_batch(location: Path) -> tuple[int, Any] | None:
    """The newest batch Spark committed and its source's end offsets as Spark logged them."""
    committed = _batches(location / "commits")
    if not committed:
        return None
    batch = committed[-1]
    lines = (location / "offsets" / str(batch)).read_text().splitlines()
    if len(lines) != 3:
        raise CheckpointCorruptError(
            f"{location}/offsets/{batch}: expected a version, the batch metadata and one source's offsets "
            f"(a cdcflow query reads one source), found {len(lines)} lines"
        )
    return batch, json.loads(lines[2])


def append_committed_batch(location: Path, source_offsets: Any) -> int:
    """Log a committed batch ending at ``source_offsets`` after the newest one; returns its id.
    The query must be stopped (its next batch would otherwise race this one)."""
    found = last_committed_batch(location)
    if found is None:
        raise CheckpointCorruptError(f"{location}: Spark has committed no batch yet; there are no offsets to change")
    batch, _ = found
    if _batches(location / "offsets")[-1] != batch:
        raise CheckpointCorruptError(
            f"{location}: batch {_batches(location / 'offsets')[-1]} was planned but never committed; run the "
            "pipeline once to finish it, then change offsets"
        )
    version, metadata, _ = (location / "offsets" / str(batch)).read_text().splitlines()
    following = batch + 1
    offsets_text = "\n".join([version, metadata, json.dumps(source_offsets, sort_keys=True)])
    write_file_atomically(location / "offsets" / str(following), offsets_text.encode())
    commit_text = (location / "commits" / str(batch)).read_bytes()
    write_file_atomically(location / "commits" / str(following), commit_text)
    return following
