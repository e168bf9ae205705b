"""How a process running cdcflow's loop is tuned (cdcflow.processes)."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
import textwrap

import pytest

from tests.paths import REPO

# A child process churns what a worker churns (a batch of encoded values, 3 MB, made and freed)
# and prints the minor page faults of the churn after the first: pages given back to the system
# and faulted in again.
_CHURN = textwrap.dedent(
    """
    import resource
    from cdcflow.processes import tune_memory_allocator
    assert tune_memory_allocator()
    def churn():
        values = [bytes(1500) for _ in range(2_000)]
        del values
    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        churn()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or "musl" in (ctypes.util.find_library("c") or ""), reason="glibc's mallopt"
)
def test_a_tuned_process_reuses_the_pages_of_what_it_freed() -> None:
    # Mutants killed: tune_memory_allocator setting nothing (each churn gives its pages back and
    # faults them in again: 26,350 faults against 0), or the mmap threshold alone (the same).
    done = subprocess.run([sys.executable, "-c", _CHURN], capture_output=True, text=True, check=True, cwd=REPO)
    assert int(done.stdout) < 1_000  # 150 MB churned: under 1% of its pages faulted in again
