"""Live snapshots in the tests: a writer that keeps changing rows while a pipeline snapshots them,
the checks of what a ``file`` sink received (each key's values never go back in the writer's own
order, every row delivered), and (``python -m tests.integration.live_snapshot_helpers``) a run that
kills itself with SIGKILL once a checkpoint with some of the snapshot's chunks is committed."""

from __future__ import annotations

import argparse
import itertools
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cdcflow.contract import Checkpoint
from cdcflow.sources.cql.live_snapshot import LIVE_FIELD
from tests.integration.snapshot_helpers import Written, kill_at_snapshot_rows_once, runner_for


class ChangingRows:
    """A thread that sets column ``v`` of random keys to 1, 2, 3... (one counter for all keys: a
    higher value is a later write) until stopped. ``last`` is each key's last value written."""

    def __init__(self, keys: Sequence[Any], write: Callable[[Any, int], None], pause_s: float = 0.005) -> None:
        self._keys = list(keys)
        self._write = write
        self._pause_s = pause_s
        self._stop = threading.Event()
        self._random = random.Random(7)
        self.last: dict[Any, int] = {}
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="changing-rows", daemon=True)

    def start(self) -> ChangingRows:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for value in itertools.count(1):
                if self._stop.wait(self._pause_s):
                    return
                key = self._random.choice(self._keys)
                self._write(key, value)
                self.last[key] = value
        except BaseException as exc:
            self.failure = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert self.failure is None, self.failure


def values_in_delivery_order(events: Sequence[Written], column: str = "v") -> dict[Any, list[tuple[str, int]]]:
    """Per key, ``(op, value of column)`` of each event that carries the column, in the file's order."""
    found: dict[Any, list[tuple[str, int]]] = {}
    for event in events:
        if event.after is not None and event.after.get(column) is not None:
            found.setdefault(event.id, []).append((event.op, int(event.after[column])))
    return found


def older_after_newer(events: Sequence[Written], column: str = "v") -> list[str]:
    """Every place where a key's delivered value goes back (a snapshot row after a newer streamed
    change, or a streamed change older than a snapshot row before it), as text; empty when none."""
    problems = []
    for key, values in values_in_delivery_order(events, column).items():
        for (op_before, before), (op_after, after) in itertools.pairwise(values):
            if after < before:
                problems.append(f"key {key}: {op_after} with {column}={after} after {op_before} with {column}={before}")
    return problems


def live_snapshot_of(checkpoint: Checkpoint | None) -> Mapping[str, Any] | None:
    """The live snapshot state a committed checkpoint holds (None: none queued)."""
    return None if checkpoint is None else checkpoint.offset.get(LIVE_FIELD)


# --- the crash driver --------------------------------------------------------------------------


def _crash_in_live_snapshot(file: Path, after_chunks: int) -> None:
    """Run ``file``'s pipeline; once a checkpoint holding at least ``after_chunks`` delivered chunks
    is committed, SIGKILL this process right after the next write of snapshot rows (flushed, so
    they are in the sink: rows of a chunk not committed)."""
    runner = runner_for(file)
    committed_chunks = [0]
    commit = runner.store.commit

    def counting_commit(checkpoints: Mapping[str, Checkpoint]) -> None:
        commit(checkpoints)
        for checkpoint in checkpoints.values():
            state = live_snapshot_of(checkpoint)
            if state is not None:
                committed_chunks[0] = max(committed_chunks[0], int(state.get("chunks", 0)))

    runner.store.commit = counting_commit  # type: ignore[method-assign]
    kill_at_snapshot_rows_once(runner, lambda: committed_chunks[0] >= after_chunks)
    runner.run()
    raise SystemExit(3)  # the snapshot ended without the kill: the test's setup is wrong


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("--after-chunks", type=int, required=True)
    args = parser.parse_args()
    _crash_in_live_snapshot(args.file, args.after_chunks)


if __name__ == "__main__":
    main()
