"""The worker engine: pipelines in threads of one process, or one pipeline split over N processes."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from connector_core.config import PipelineSpec
from connector_core.errors import CdcflowError
from connector_core.metrics import serve_metrics
from connector_core.pipeline import AllPartitions, HashAssignment, PartitionAssignment, build_runner

__all__ = ["WorkerOptions", "run_spark", "run_worker", "run_worker_processes", "tune_garbage_collector"]

log = logging.getLogger("cdcflow.worker")


@dataclass(frozen=True)
class WorkerOptions:
    worker_index: int = 0
    worker_count: int = 1
    metrics_port: int | None = None

    def assignment(self) -> PartitionAssignment:
        return AllPartitions() if self.worker_count == 1 else HashAssignment(self.worker_index, self.worker_count)


def _install_stop_handlers(stop: threading.Event) -> None:
    def request_stop(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            log.warning("second %s: exiting without a final checkpoint", signal.Signals(signum).name)
            os._exit(130)
        log.info("%s received: finishing the current read, flushing and checkpointing", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


def tune_garbage_collector() -> None:
    """Collect cycles less often in a worker process.

    The delivery loop allocates several short-lived containers per record and none that form
    cycles, so Python's default (a young-generation pass every 700 allocations, scanning what
    survives) spends 10-20% of a worker's CPU finding nothing. What start-up built (modules,
    plugins, schemas) is frozen out of the scans.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def run_worker(specs: Sequence[PipelineSpec], factory: Any, options: WorkerOptions) -> int:
    """Run pipelines in this process until drained or signalled. Returns the process exit code."""
    tune_garbage_collector()
    if options.metrics_port is not None:
        serve_metrics(options.metrics_port + options.worker_index)

    def run_one(spec: PipelineSpec, stop: threading.Event) -> None:
        build_runner(spec, factory, options.assignment(), stop, worker_id=str(options.worker_index)).run()

    return _run_in_threads(specs, run_one)


def run_spark(specs: Sequence[PipelineSpec], factory: Any) -> int:
    """Run pipelines as Spark queries (one shared session) until drained or signalled."""
    from connector_core.spark_engine import run_spark_pipeline

    return _run_in_threads(specs, lambda spec, stop: run_spark_pipeline(spec, factory, stop))


def _run_in_threads(specs: Sequence[PipelineSpec], body: Callable[[PipelineSpec, threading.Event], None]) -> int:
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        _install_stop_handlers(stop)
    failures: list[BaseException] = []

    def run_one(spec: PipelineSpec) -> None:
        try:
            body(spec, stop)
            log.info("pipeline %s finished", spec.name)
        except BaseException as exc:
            # Our own errors explain themselves; a traceback is for the unexpected.
            expected = isinstance(exc, CdcflowError)
            log.error(
                "pipeline %s failed: %s: %s", spec.name, type(exc).__name__, exc, exc_info=None if expected else exc
            )
            failures.append(exc)
            stop.set()  # one failed pipeline stops the process, so a supervisor restarts all cleanly

    threads = [threading.Thread(target=run_one, args=(s,), name=f"pipeline-{s.name}") for s in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)  # short joins keep the main thread responsive to signals
    return 1 if failures else 0


def run_worker_processes(files: Sequence[Path], workers: int, extra_args: Sequence[str]) -> int:
    """Start ``workers`` processes, each owning its hash share of every pipeline's partitions."""
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "connector_core.cli",
                "run",
                *map(str, files),
                "--worker-index",
                str(i),
                "--worker-count",
                str(workers),
                *extra_args,
            ]
        )
        for i in range(workers)
    ]

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [child.wait() for child in children]
    return next((code for code in codes if code != 0), 0)
