"""What every engine's process does the same way: stop on a signal (within a bound), run pipelines
in threads, and keep the garbage collector out of a per-record loop."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from cdcflow.config import PipelineSpec
from cdcflow.errors import CdcflowError

__all__ = [
    "EXIT_SHUTDOWN_TIMEOUT",
    "install_stop_handlers",
    "run_in_threads",
    "tune_for_the_loop",
    "tune_garbage_collector",
    "tune_memory_allocator",
]

log = logging.getLogger("cdcflow.process")

EXIT_SHUTDOWN_TIMEOUT = 1
"""The exit code of a process that did not flush and checkpoint within ``engine.shutdown_timeout_s``."""


def install_stop_handlers(stop: threading.Event, shutdown_timeout_s: float | None = None) -> None:
    """SIGTERM and SIGINT set ``stop`` (finish the read, flush, checkpoint); a second one exits at once.

    With ``shutdown_timeout_s``, the process also ends that long after the first signal, whatever
    it is waiting for (a sink that no longer answers blocks writes and flushes for its own delivery
    timeout, minutes). Exiting then loses nothing: offsets are committed only after the sink
    acknowledged everything before them, so what was not acknowledged is read again at the next
    start.
    """

    def request_stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("second %s: exiting without a final checkpoint", name)
            _exit_now(130)
        log.info("%s received: finishing the current read, flushing and checkpointing", name)
        stop.set()
        if shutdown_timeout_s is not None:
            timer = threading.Timer(shutdown_timeout_s, _give_up_stopping, args=(name, shutdown_timeout_s))
            timer.daemon = True
            timer.start()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


def _give_up_stopping(signal_name: str, shutdown_timeout_s: float) -> None:
    log.error(
        "not stopped within engine.shutdown_timeout_s = %g s of %s (a sink or checkpoint store does not "
        "answer): exiting without a final checkpoint; what was not acknowledged is read again at the next start",
        shutdown_timeout_s,
        signal_name,
    )
    _exit_now(EXIT_SHUTDOWN_TIMEOUT)


def _exit_now(code: int) -> None:
    """Exit at once (threads blocked in a client library would hold up a normal exit), logs first."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(code)


def tune_garbage_collector() -> None:
    """Collect cycles less often in a process that runs cdcflow's loop.

    The delivery loop allocates several short-lived containers per record and none that form
    cycles, so Python's default (a young-generation pass every 700 allocations, scanning what
    survives) spends 10-20% of a worker's CPU finding nothing. What start-up built (modules,
    plugins, schemas) is frozen out of the scans.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
# Blocks under 4 MiB come from the heap (not mmap), and its free top is given back to the system
# only past 16 MiB: a batch's encoded values and the producer's copies of them (a few MB, freed once
# delivered) then reuse pages already mapped. With glibc's defaults (128 KiB, adapting) each batch
# gave its pages back and faulted them in again: datagen -> kafka took 0.44 minor page faults an
# event against a plain Producer loop's 0.10, and 5.8 us of CPU an event against 5.1-5.4 with these
# settings (1.5 KB avro events, 2026-11-26; 32/128/16 MiB did no better). What stays mapped is
# bounded (16 MiB of free top, 8 MiB of padding), and larger blocks (a commit-log segment read
# whole) still come from mmap and go back when freed.
_ALLOCATOR_SETTINGS = ((_M_MMAP_THRESHOLD, 4 << 20), (_M_TRIM_THRESHOLD, 16 << 20), (_M_TOP_PAD, 8 << 20))


def tune_memory_allocator() -> bool:
    """Keep freed heap memory mapped in a process that runs cdcflow's loop (glibc only); whether
    the settings took."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False  # not glibc (musl, macOS): its own allocator's defaults stay
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    took = [mallopt(parameter, value) == 1 for parameter, value in _ALLOCATOR_SETTINGS]  # each, even after a refusal
    return all(took)


def tune_for_the_loop() -> None:
    """What a process running cdcflow's delivery loop tunes before it starts: the garbage
    collector and the memory allocator (a worker process, a group member, the benchmarks that
    measure them)."""
    tune_garbage_collector()
    tune_memory_allocator()


def run_in_threads(specs: Sequence[PipelineSpec], body: Callable[[PipelineSpec, threading.Event], None]) -> int:
    """Run ``body(spec, stop)`` for every pipeline in a thread of its own until all return.
    One failed pipeline stops the others. Returns the process exit code."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        install_stop_handlers(stop, max(spec.engine.shutdown_timeout_s for spec in specs))
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
