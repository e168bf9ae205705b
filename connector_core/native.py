"""Which core runs cdcflow's hot paths: the compiled one or the pure-Python reference.

The compiled core, ``cdcflow._native``, is the Rust crate in ``native/`` (commit-log decoding,
Avro and Connect JSON encoding, compact event batches, Kafka JSON envelopes to Spark rows). It is
optional: ``scripts/setup.sh`` builds it when cargo is on the PATH, and without it every path runs
in Python, which stays the reference the compiled one is tested against byte for byte.
``CDCFLOW_PURE_PYTHON=1`` runs the pure-Python core even where the compiled one is built (CI runs
the equivalence tests both ways).
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "core_description", "native_module"]

PURE_PYTHON_ENV = "CDCFLOW_PURE_PYTHON"


@functools.cache
def native_module() -> ModuleType | None:
    """``cdcflow._native`` when it is built and not switched off; None runs the pure-Python core."""
    if os.environ.get(PURE_PYTHON_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    try:
        return importlib.import_module("cdcflow._native")
    except ImportError:
        return None


def core_description() -> str:
    """One line for the start-up log and ``cdcflow plugins list``: which core, and why."""
    module = native_module()
    if module is not None:
        return (
            f"compiled (cdcflow._native {module.__version__}, Rust): commit-log decoding, Avro and JSON encoding,"
            " compact event batches, Kafka JSON envelopes to Spark rows and typed columns"
        )
    if os.environ.get(PURE_PYTHON_ENV):
        return f"pure Python ({PURE_PYTHON_ENV} is set)"
    return "pure Python (cdcflow._native is not built: run scripts/setup.sh with cargo on the PATH)"
