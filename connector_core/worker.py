"""The worker engine: pipelines in threads of one process, or one pipeline split over N processes."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from cdcflow.config import PipelineSpec
from cdcflow.metrics import serve_metrics
from cdcflow.offsets import pipeline_running
from cdcflow.pipeline import AllPartitions, HashAssignment, PartitionAssignment, build_runner
from cdcflow.processes import run_in_threads, tune_for_the_loop

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["WorkerOptions", "run_worker", "run_worker_processes"]

log = logging.getLogger("cdcflow.worker")


@dataclass(frozen=True)
class WorkerOptions:
    worker_index: int = 0
    worker_count: int = 1
    metrics_port: int | None = None

    def assignment(self) -> PartitionAssignment:
        return AllPartitions() if self.worker_count == 1 else HashAssignment(self.worker_index, self.worker_count)


def run_worker(specs: Sequence[PipelineSpec], factory: PluginRegistry, options: WorkerOptions) -> int:
    """Run pipelines in this process until drained or signalled. Returns the process exit code."""
    tune_for_the_loop()
    if options.metrics_port is not None:
        serve_metrics(options.metrics_port + options.worker_index)

    def run_one(spec: PipelineSpec, stop: threading.Event) -> None:
        with pipeline_running(spec):  # `cdcflow offsets reset` refuses to change a running pipeline
            build_runner(spec, factory, options.assignment(), stop, worker_id=str(options.worker_index)).run()

    return run_in_threads(specs, run_one)


def run_worker_processes(files: Sequence[Path], workers: int, extra_args: Sequence[str]) -> int:
    """Start ``workers`` processes, each owning its hash share of every pipeline's partitions."""
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cdcflow.cli",
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
