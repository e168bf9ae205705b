"""The TiKV RawKV change source, ordered by resolved-ts (see :mod:`sources.tikv_rawkv.source`).

The PD/TiKV protocol client lives in :mod:`sources.tikv_rawkv.client` and is shared with the
``tikv`` sink.
"""

from sources.tikv_rawkv.source import TiKVRawKVSource, TiKVRawKVSourceConfig

__all__ = ["TiKVRawKVSource", "TiKVRawKVSourceConfig"]
