"""``cdcflow doctor`` of the spark engine (issue 27, item 1): the master answers, and the executors'
Python runs cdcflow at the driver's version. Nothing is started: a master's port is connected to,
the executors' interpreter is run once."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.doctor_helpers import doctor


def _pipeline(folder: Path, engine: str) -> Path:
    file = folder / "spark.yaml"
    file.write_text(
        "name: doctor-spark\nsource: {type: datagen, count: 1}\nsink: {type: file, path: out.jsonl}\n"
        f"engine: {{type: spark{engine}}}\n"
    )
    return file


def test_doctor_passes_a_local_master_with_this_python(tmp_path: Path) -> None:
    code, checks, _ = doctor(_pipeline(tmp_path, ""))
    assert code == 0, checks
    assert checks["Spark master"]["detail"].startswith("local[*]")
    python = checks[f"executors' Python {sys.executable}"]
    assert python["status"] == "ok" and f"Python {sys.version_info.major}.{sys.version_info.minor}" in python["detail"]


def test_doctor_fails_a_master_that_does_not_answer_and_a_python_without_cdcflow(tmp_path: Path) -> None:
    other = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    found = subprocess.run([other, "-c", "import cdcflow"], capture_output=True, check=False) if other else None
    if found is None or found.returncode == 0:
        pytest.skip("needs an interpreter without cdcflow")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, checks, _ = doctor(_pipeline(tmp_path, f", master: 'spark://127.0.0.1:{port}', python: {other}"))
    assert code == 1
    master = checks[f"Spark master 127.0.0.1:{port} reachable"]
    assert master["status"] == "fail" and "ConnectionRefusedError" in master["detail"], master
    python = checks[f"executors' Python {other}"]
    assert python["status"] == "fail" and "cannot import cdcflow" in python["detail"], python
