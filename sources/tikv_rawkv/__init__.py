"""The TiKV RawKV change source, ordered by resolved-ts (see :mod:`cdcflow.sources.tikv_rawkv.source`).

The PD/TiKV protocol client lives in :mod:`cdcflow.sources.tikv_client` and is shared with the
``tikv`` sink.
"""

from cdcflow.sources.tikv_rawkv.source import TiKVRawKVSource, TiKVRawKVSourceConfig

__all__ = ["TiKVRawKVSource", "TiKVRawKVSourceConfig"]
