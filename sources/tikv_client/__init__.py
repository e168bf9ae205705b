"""A PD/TiKV client for RawKV (API V1 and V2) over gRPC, written against cdcflow's own protos."""

from cdcflow.sources.tikv_client.codec import KeyCodec
from cdcflow.sources.tikv_client.pd import PDClient, RegionInfo
from cdcflow.sources.tikv_client.rawkv import RawKVClient
from cdcflow.sources.tikv_client.tls import TLSConfig

__all__ = ["KeyCodec", "PDClient", "RawKVClient", "RegionInfo", "TLSConfig"]
