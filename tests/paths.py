"""Where the tests find the repository and its fixtures, wherever a test file sits in the tree."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
COMMITLOG_FIXTURES = FIXTURES / "commitlog"
