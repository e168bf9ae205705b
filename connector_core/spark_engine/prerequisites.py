"""What the spark engine needs before a query can start: Java, a reachable master, and executors
whose Python runs cdcflow at the driver's version (``cdcflow doctor``'s engine checks)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence

from cdcflow.config import SparkEngineConfig
from cdcflow.errors import EngineUnavailableError
from cdcflow.prerequisites import CheckResult
from cdcflow.spark_engine.session import _check_java, is_local_master, spark_version

__all__ = ["check_spark_engine"]

# A standalone master's URL: spark://host:port, or spark://h1:p1,h2:p2 for masters with standby.
_STANDALONE = "spark://"


def check_spark_engine(engine: SparkEngineConfig, timeout_s: float) -> Sequence[CheckResult]:
    return [_check_runtime(), *_check_master(engine.master, timeout_s), _check_executor_python(engine)]


def _check_runtime() -> CheckResult:
    check = "pyspark and Java"
    try:
        version = spark_version()
        _check_java()
    except EngineUnavailableError as exc:
        return CheckResult.fail(check, str(exc), "install what it names on the machine that runs cdcflow")
    return CheckResult.ok(check, f"pyspark {version}, a Java the engine can use")


def _check_master(master: str | None, timeout_s: float) -> list[CheckResult]:
    if is_local_master(master):
        return [CheckResult.ok("Spark master", f"{master or 'local[*]'}: executors run in this process")]
    assert master is not None
    if not master.startswith(_STANDALONE):
        return [CheckResult.skip(f"Spark master {master}", "only standalone masters (spark://) are checked")]
    results = []
    for address in master[len(_STANDALONE) :].split(","):
        host, _, port = address.rpartition(":")
        check = f"Spark master {host}:{port} reachable"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                results.append(CheckResult.ok(check, "it accepted a connection"))
        except (OSError, ValueError) as exc:
            results.append(
                CheckResult.fail(
                    check, f"{type(exc).__name__}: {exc}", "start the master, or fix engine.master (spark://HOST:PORT)"
                )
            )
    return results


def _check_executor_python(engine: SparkEngineConfig) -> CheckResult:
    """Spark refuses an executor whose Python's minor version is not the driver's ("Python in
    worker has different version"), and an executor without cdcflow cannot read a source."""
    python = engine.python or os.environ.get("PYSPARK_PYTHON") or sys.executable
    check = f"executors' Python {python}"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    probe = "import sys, cdcflow; print('%d.%d' % sys.version_info[:2])"
    where = "" if is_local_master(engine.master) else " (checked on this machine: every worker needs the same path)"
    try:
        answer = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CheckResult.fail(check, f"cannot run it: {exc}", "set engine.python to an interpreter with cdcflow")
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckResult.fail(check, f"it cannot import cdcflow: {last}", "install cdcflow into it")
    version = answer.stdout.strip()
    if version != here:
        return CheckResult.fail(
            check,
            f"Python {version}, the driver runs {here}: Spark refuses executors of another minor version",
            f"set engine.python to a Python {here} with cdcflow",
        )
    return CheckResult.ok(check, f"Python {version} with cdcflow, as the driver{where}")
