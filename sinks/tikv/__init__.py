"""The downstream TiKV sink (see :mod:`sinks.tikv.sink`)."""

from sinks.tikv.sink import TiKVSink, TiKVSinkConfig

__all__ = ["TiKVSink", "TiKVSinkConfig"]
