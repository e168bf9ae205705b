"""Registers the ``tikv_rawkv`` source."""

from typing import Any

from cdcflow.extras import TIKV, Extra
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sources.tikv_rawkv.source import TiKVRawKVSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [TiKVRawKVSource]


@hookimpl
def cdcflow_required_extras() -> list[Extra]:
    return [TIKV]
