"""Where the oracles' builds are kept, and one build of an oracle at a time."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["build_lock", "oracle_cache"]


def oracle_cache(name: str) -> Path:
    """``$CDCFLOW_CACHE/oracles/<name>`` (``~/.cache/cdcflow`` by default)."""
    base = Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow"))
    return base / "oracles" / name


@contextmanager
def build_lock(root: Path) -> Iterator[None]:
    """Holds ``root``'s lock file: two pytest processes may want the same build at once."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
