"""The downstream TiKV sink (see :mod:`cdcflow.sinks.tikv.sink`)."""

from cdcflow.sinks.tikv.sink import TiKVSink, TiKVSinkConfig

__all__ = ["TiKVSink", "TiKVSinkConfig"]
