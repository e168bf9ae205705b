"""The field types pipeline files share: paths resolved against the pipeline file's folder, names.

Apart from :mod:`cdcflow.config` so that the models it nests (a worker group's, a Kafka client's)
can use them while it imports those models; :mod:`cdcflow.config` re-exports them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo

__all__ = ["NAME_PATTERN", "ResolvedLocation", "ResolvedPath"]


def _resolve_against_pipeline_folder(value: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    path = value.expanduser()
    return path if path.is_absolute() or base is None else (Path(base) / path).resolve()


ResolvedPath = Annotated[Path, AfterValidator(_resolve_against_pipeline_folder)]
"""A filesystem path in a config; a relative one resolves against the pipeline file's folder."""

_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""What a pipeline's or a group's name may be: it becomes part of file paths, topics and ids."""


def _resolve_location(value: str, info: ValidationInfo) -> str:
    if _URI_SCHEME.match(value):
        return value  # hdfs://, s3a://, file://...: Spark's Hadoop filesystems take it as it is
    return str(_resolve_against_pipeline_folder(Path(value), info))


ResolvedLocation = Annotated[str, AfterValidator(_resolve_location)]
"""A path or a Hadoop filesystem URI; a relative path resolves against the pipeline file's folder."""
