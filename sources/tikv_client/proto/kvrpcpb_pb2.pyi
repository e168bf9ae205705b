from cdcflow.sources.tikv_client.proto import errorpb_pb2 as _errorpb_pb2
from cdcflow.sources.tikv_client.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class APIVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    V1: _ClassVar[APIVersion]
    V1TTL: _ClassVar[APIVersion]
    V2: _ClassVar[APIVersion]

class ExtraOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Noop: _ClassVar[ExtraOp]
    ReadOldValue: _ClassVar[ExtraOp]
V1: APIVersion
V1TTL: APIVersion
V2: APIVersion
Noop: ExtraOp
ReadOldValue: ExtraOp

class Context(_message.Message):
    __slots__ = ("region_id", "region_epoch", "peer", "term", "api_version", "request_source", "keyspace_id")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SOURCE_FIELD_NUMBER: _ClassVar[int]
    KEYSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    region_epoch: _metapb_pb2.RegionEpoch
    peer: _metapb_pb2.Peer
    term: int
    api_version: APIVersion
    request_source: str
    keyspace_id: int
    def __init__(self, region_id: _Optional[int] = ..., region_epoch: _Optional[_Union[_metapb_pb2.RegionEpoch, _Mapping]] = ..., peer: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ..., term: _Optional[int] = ..., api_version: _Optional[_Union[APIVersion, str]] = ..., request_source: _Optional[str] = ..., keyspace_id: _Optional[int] = ...) -> None: ...

class KeyError(_message.Message):
    __slots__ = ("retryable", "abort")
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    retryable: str
    abort: str
    def __init__(self, retryable: _Optional[str] = ..., abort: _Optional[str] = ...) -> None: ...

class KvPair(_message.Message):
    __slots__ = ("error", "key", "value", "commit_ts")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    error: KeyError
    key: bytes
    value: bytes
    commit_ts: int
    def __init__(self, error: _Optional[_Union[KeyError, _Mapping]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., commit_ts: _Optional[int] = ...) -> None: ...

class KeyRange(_message.Message):
    __slots__ = ("start_key", "end_key")
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    start_key: bytes
    end_key: bytes
    def __init__(self, start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ...) -> None: ...

class RawGetRequest(_message.Message):
    __slots__ = ("context", "key", "cf")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    context: Context
    key: bytes
    cf: str
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., key: _Optional[bytes] = ..., cf: _Optional[str] = ...) -> None: ...

class RawGetResponse(_message.Message):
    __slots__ = ("region_error", "error", "value", "not_found")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: str
    value: bytes
    not_found: bool
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[str] = ..., value: _Optional[bytes] = ..., not_found: _Optional[bool] = ...) -> None: ...

class RawBatchGetRequest(_message.Message):
    __slots__ = ("context", "keys", "cf")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    context: Context
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    cf: str
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., keys: _Optional[_Iterable[bytes]] = ..., cf: _Optional[str] = ...) -> None: ...

class RawBatchGetResponse(_message.Message):
    __slots__ = ("region_error", "pairs")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    pairs: _containers.RepeatedCompositeFieldContainer[KvPair]
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., pairs: _Optional[_Iterable[_Union[KvPair, _Mapping]]] = ...) -> None: ...

class RawPutRequest(_message.Message):
    __slots__ = ("context", "key", "value", "cf", "ttl", "for_cas")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    FOR_CAS_FIELD_NUMBER: _ClassVar[int]
    context: Context
    key: bytes
    value: bytes
    cf: str
    ttl: int
    for_cas: bool
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., cf: _Optional[str] = ..., ttl: _Optional[int] = ..., for_cas: _Optional[bool] = ...) -> None: ...

class RawPutResponse(_message.Message):
    __slots__ = ("region_error", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: str
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class RawBatchPutRequest(_message.Message):
    __slots__ = ("context", "pairs", "cf", "for_cas", "ttls")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    FOR_CAS_FIELD_NUMBER: _ClassVar[int]
    TTLS_FIELD_NUMBER: _ClassVar[int]
    context: Context
    pairs: _containers.RepeatedCompositeFieldContainer[KvPair]
    cf: str
    for_cas: bool
    ttls: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., pairs: _Optional[_Iterable[_Union[KvPair, _Mapping]]] = ..., cf: _Optional[str] = ..., for_cas: _Optional[bool] = ..., ttls: _Optional[_Iterable[int]] = ...) -> None: ...

class RawBatchPutResponse(_message.Message):
    __slots__ = ("region_error", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: str
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class RawDeleteRequest(_message.Message):
    __slots__ = ("context", "key", "cf", "for_cas")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    FOR_CAS_FIELD_NUMBER: _ClassVar[int]
    context: Context
    key: bytes
    cf: str
    for_cas: bool
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., key: _Optional[bytes] = ..., cf: _Optional[str] = ..., for_cas: _Optional[bool] = ...) -> None: ...

class RawDeleteResponse(_message.Message):
    __slots__ = ("region_error", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: str
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class RawBatchDeleteRequest(_message.Message):
    __slots__ = ("context", "keys", "cf", "for_cas")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    FOR_CAS_FIELD_NUMBER: _ClassVar[int]
    context: Context
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    cf: str
    for_cas: bool
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., keys: _Optional[_Iterable[bytes]] = ..., cf: _Optional[str] = ..., for_cas: _Optional[bool] = ...) -> None: ...

class RawBatchDeleteResponse(_message.Message):
    __slots__ = ("region_error", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: str
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class RawScanRequest(_message.Message):
    __slots__ = ("context", "start_key", "limit", "key_only", "cf", "reverse", "end_key")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    KEY_ONLY_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    context: Context
    start_key: bytes
    limit: int
    key_only: bool
    cf: str
    reverse: bool
    end_key: bytes
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., start_key: _Optional[bytes] = ..., limit: _Optional[int] = ..., key_only: _Optional[bool] = ..., cf: _Optional[str] = ..., reverse: _Optional[bool] = ..., end_key: _Optional[bytes] = ...) -> None: ...

class RawScanResponse(_message.Message):
    __slots__ = ("region_error", "kvs")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    KVS_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    kvs: _containers.RepeatedCompositeFieldContainer[KvPair]
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., kvs: _Optional[_Iterable[_Union[KvPair, _Mapping]]] = ...) -> None: ...

class RawDeleteRangeRequest(_message.Message):
    __slots__ = ("context", "start_key", "end_key", "cf")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    context: Context
    start_key: bytes
    end_key: bytes
    cf: str
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., cf: _Optional[str] = ...) -> None: ...

class RawDeleteRangeResponse(_message.Message):
    __slots__ = ("region_error", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: str
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...
