"""``cdcflow doctor`` as a user runs it, for the prerequisite tests of each plugin (issue 27)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

__all__ = ["cdcflow", "doctor"]


def cdcflow(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The ``cdcflow`` command line in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def doctor(file: Path) -> tuple[int, dict[str, dict[str, str]], str]:
    """``cdcflow doctor --json FILE``: its exit code, every check by name, and what it logged."""
    result = cdcflow("doctor", "--json", str(file), cwd=file.parent)
    (pipeline,) = json.loads(result.stdout)
    checks = {check["check"]: check for plugin in pipeline["plugins"] for check in plugin["checks"]}
    return result.returncode, checks, result.stderr
