"""The test run's own third-party plugin: ``tests/fixtures/example_plugin`` is installed into
``build/test-plugins`` and put on the path of pytest and of every process it starts, so the tests
see a real entry-point plugin while a user's environment never has it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PLUGIN = REPO / "tests" / "fixtures" / "example_plugin"
TEST_PLUGINS = REPO / "build" / "test-plugins"


def _newest_change(folder: Path) -> float:
    return max(p.stat().st_mtime for p in folder.rglob("*") if p.is_file() and "build" not in p.parts)


def pytest_configure(config: pytest.Config) -> None:
    marker = TEST_PLUGINS / ".installed"
    if not marker.exists() or marker.stat().st_mtime < _newest_change(EXAMPLE_PLUGIN):
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        target = ["--upgrade", "--target", str(TEST_PLUGINS)]
        subprocess.run([*pip, *target, str(EXAMPLE_PLUGIN)], check=True)
        marker.touch()
    sys.path.insert(0, str(TEST_PLUGINS))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TEST_PLUGINS), os.environ.get("PYTHONPATH")]))
