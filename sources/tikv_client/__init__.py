"""A PD/TiKV client for RawKV (API V1 and V2) over gRPC, written against cdcflow's own protos.

The clients (``pd.PDClient``, ``rawkv.RawKVClient``) need grpcio and protobuf, the ``cdcflow[tikv]``
extra; this package imports only what a config model needs, so the TiKV plugins register (and
``cdcflow plugins list`` names the missing extra) without them.
"""

from cdcflow.sources.tikv_client.codec import KeyCodec
from cdcflow.sources.tikv_client.tls import TLSConfig

__all__ = ["KeyCodec", "TLSConfig"]
