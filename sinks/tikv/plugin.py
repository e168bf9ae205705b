"""Registers the ``tikv`` sink."""

from typing import Any

from cdcflow.extras import TIKV, Extra
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sinks.tikv.sink import TiKVSink


@hookimpl
def cdcflow_sink_types() -> list[type[Any]]:
    return [TiKVSink]


@hookimpl
def cdcflow_required_extras() -> list[Extra]:
    return [TIKV]
