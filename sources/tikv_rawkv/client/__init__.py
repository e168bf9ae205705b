"""A PD/TiKV client for RawKV (API V1 and V2) over gRPC, written against cdcflow's own protos."""

from sources.tikv_rawkv.client.codec import KeyCodec
from sources.tikv_rawkv.client.pd import PDClient, RegionInfo
from sources.tikv_rawkv.client.rawkv import RawKVClient

__all__ = ["KeyCodec", "PDClient", "RawKVClient", "RegionInfo"]
