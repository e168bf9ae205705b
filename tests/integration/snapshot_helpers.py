"""Snapshot pipelines for the tests: run one in this process with a hook in its sink (so a change
is made while the snapshot runs, at a known point), read back what a ``file`` sink wrote, replay it
as a consumer would, and (``python -m tests.integration.snapshot_helpers``) run one that kills
itself with SIGKILL in the middle of its snapshot."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import load_pipeline
from cdcflow.events import ChangeEvent, Record
from cdcflow.pipeline import PipelineRunner, build_runner
from cdcflow.plugins import PluginRegistry

SLICE_MARK = "snapshot/"


def runner_for(file: Path) -> PipelineRunner:
    registry = PluginRegistry.from_entry_points()
    return build_runner(load_pipeline(file, registry), registry)


def hook_first_snapshot_write(runner: PipelineRunner, hook: Callable[[list[ChangeEvent]], None]) -> None:
    """Call ``hook`` once, with the snapshot rows of the first sink write that holds any, after
    they are written and before the pipeline reads on."""
    write = runner.sink.write
    done = threading.Event()

    def hooked(records: Sequence[Record]) -> Any:
        result = write(records)
        rows = [r for r in records if isinstance(r, ChangeEvent) and r.op == "r"]
        if rows and not done.is_set():
            done.set()
            hook(rows)
        return result

    runner.sink.write = hooked  # type: ignore[method-assign]


@dataclass
class Running:
    runner: PipelineRunner
    thread: threading.Thread
    failure: list[BaseException]

    def alive(self) -> bool:
        return self.thread.is_alive()

    def wait_for(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if not self.thread.is_alive():
                raise AssertionError(f"the pipeline ended before {what}") from (self.failure or [None])[0]
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}")
            time.sleep(0.2)


@contextmanager
def running(runner: PipelineRunner) -> Iterator[Running]:
    """The pipeline in a thread; stopped (flush, commit) on leaving. Its failure, if any, is in
    ``failure``."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="pipeline", daemon=True)
    thread.start()
    try:
        yield Running(runner, thread, failure)
    finally:
        runner.stop.set()
        thread.join(timeout=120)
        assert not thread.is_alive(), "the pipeline did not stop"


@dataclass(frozen=True)
class Written:
    """One line of a ``file`` sink: the event's key and its envelope."""

    key: dict[str, Any]
    op: str
    after: dict[str, Any] | None
    source: dict[str, Any]

    @property
    def id(self) -> Any:
        return self.key["id"]


def written(path: Path) -> list[Written]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        if not line.endswith("}"):
            continue  # a line a killed process left half-written
        entry = json.loads(line)
        value = entry["value"]
        if value is None or "op" not in value:
            continue  # schema-change events
        found.append(Written(entry["key"], value["op"], value["after"], value["source"]))
    return found


def assert_snapshot_first(events: Sequence[Written]) -> None:
    """Every snapshot row is before every stream event."""
    ops = [e.op for e in events]
    assert "r" in ops, "no snapshot rows"
    last_row = max(i for i, op in enumerate(ops) if op == "r")
    streamed = [i for i, op in enumerate(ops) if op != "r"]
    assert not streamed or streamed[0] > last_row, f"a stream event at {streamed[0]} before snapshot row {last_row}"


def replayed(events: Sequence[Written]) -> dict[Any, dict[str, Any]]:
    """The state a consumer builds by applying the events in order (upserts of what ``after``
    carries, deletes)."""
    state: dict[Any, dict[str, Any]] = {}
    for event in events:
        if event.op == "d":
            state.pop(event.id, None)
        else:
            assert event.after is not None
            state[event.id] = {**state.get(event.id, {}), **event.after}
    return state


def wait_for_process(
    condition: Callable[[], bool], timeout_s: float, what: str, process: subprocess.Popen[bytes], log: list[str]
) -> None:
    """Poll ``condition`` while ``process`` (a ``start_logged`` worker) runs; fail with its log."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the worker exited with {process.returncode} before {what}: {''.join(log)[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}: {''.join(log)[-3000:]}")
        time.sleep(0.3)


def slice_of(token: int, count: int) -> int:
    from cdcflow.sources.cql.snapshot import token_slices

    for index, (start, end) in enumerate(token_slices(count)):
        if (start < token or index == 0) and token <= end:
            return index
    raise AssertionError(token)


# --- the crash driver --------------------------------------------------------------------------


def kill_at_snapshot_rows_once(runner: PipelineRunner, ready: Callable[[], bool]) -> None:
    """Once ``ready()``, the process flushes the sink and SIGKILLs itself right after a write that
    held snapshot rows (op ``r``): a crash mid-snapshot, after what ``ready`` waited for."""
    write = runner.sink.write

    def killing_write(records: Sequence[Record]) -> Any:
        result = write(records)
        if ready() and any(isinstance(r, ChangeEvent) and r.op == "r" for r in records):
            runner.sink.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    runner.sink.write = killing_write  # type: ignore[method-assign]


def _crash_in_snapshot(file: Path, after_slices: int, during: list[str]) -> None:
    """Run ``file``'s pipeline; at its first snapshot write run the CQL statements ``during``;
    once ``after_slices`` slices are committed, SIGKILL this process right after the next write
    of snapshot rows (flushed, so they are in the sink: rows of a slice not committed)."""
    from cdcflow.sources.cassandra_commitlog.cluster import connect

    runner = runner_for(file)
    committed_slices: set[str] = set()
    commit = runner.store.commit

    def counting_commit(checkpoints: Any) -> None:
        commit(checkpoints)
        committed_slices.update(pid for pid, c in checkpoints.items() if SLICE_MARK in pid and c.offset.get("done"))

    runner.store.commit = counting_commit  # type: ignore[method-assign]

    def change(rows: list[ChangeEvent]) -> None:
        cluster, session = connect(["127.0.0.1"])
        for statement in during:
            session.execute(statement)
        cluster.shutdown()

    hook_first_snapshot_write(runner, change)
    kill_at_snapshot_rows_once(runner, lambda: len(committed_slices) >= after_slices)
    runner.run()
    raise SystemExit(3)  # the snapshot ended without the kill: the test's setup is wrong


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("--after-slices", type=int, required=True)
    parser.add_argument("--during", action="append", default=[])
    args = parser.parse_args()
    _crash_in_snapshot(args.file, args.after_slices, args.during)


if __name__ == "__main__":
    main()
