from cdcflow.sources.tikv_client.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[ErrorType]
    UNKNOWN: _ClassVar[ErrorType]
    NOT_BOOTSTRAPPED: _ClassVar[ErrorType]
    STORE_TOMBSTONE: _ClassVar[ErrorType]
    ALREADY_BOOTSTRAPPED: _ClassVar[ErrorType]
    INCOMPATIBLE_VERSION: _ClassVar[ErrorType]
    REGION_NOT_FOUND: _ClassVar[ErrorType]
    GLOBAL_CONFIG_NOT_FOUND: _ClassVar[ErrorType]
    DUPLICATED_ENTRY: _ClassVar[ErrorType]
    ENTRY_NOT_FOUND: _ClassVar[ErrorType]
    INVALID_VALUE: _ClassVar[ErrorType]
    DATA_COMPACTED: _ClassVar[ErrorType]
    REGIONS_NOT_CONTAIN_ALL_KEY_RANGE: _ClassVar[ErrorType]
OK: ErrorType
UNKNOWN: ErrorType
NOT_BOOTSTRAPPED: ErrorType
STORE_TOMBSTONE: ErrorType
ALREADY_BOOTSTRAPPED: ErrorType
INCOMPATIBLE_VERSION: ErrorType
REGION_NOT_FOUND: ErrorType
GLOBAL_CONFIG_NOT_FOUND: ErrorType
DUPLICATED_ENTRY: ErrorType
ENTRY_NOT_FOUND: ErrorType
INVALID_VALUE: ErrorType
DATA_COMPACTED: ErrorType
REGIONS_NOT_CONTAIN_ALL_KEY_RANGE: ErrorType

class RequestHeader(_message.Message):
    __slots__ = ("cluster_id", "sender_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    sender_id: int
    def __init__(self, cluster_id: _Optional[int] = ..., sender_id: _Optional[int] = ...) -> None: ...

class ResponseHeader(_message.Message):
    __slots__ = ("cluster_id", "error")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    error: Error
    def __init__(self, cluster_id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("type", "message")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: ErrorType
    message: str
    def __init__(self, type: _Optional[_Union[ErrorType, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("name", "member_id", "peer_urls", "client_urls")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_URLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    member_id: int
    peer_urls: _containers.RepeatedScalarFieldContainer[str]
    client_urls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., member_id: _Optional[int] = ..., peer_urls: _Optional[_Iterable[str]] = ..., client_urls: _Optional[_Iterable[str]] = ...) -> None: ...

class GetMembersRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ...) -> None: ...

class GetMembersResponse(_message.Message):
    __slots__ = ("header", "members", "leader")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    members: _containers.RepeatedCompositeFieldContainer[Member]
    leader: Member
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., leader: _Optional[_Union[Member, _Mapping]] = ...) -> None: ...

class Timestamp(_message.Message):
    __slots__ = ("physical", "logical", "suffix_bits")
    PHYSICAL_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_BITS_FIELD_NUMBER: _ClassVar[int]
    physical: int
    logical: int
    suffix_bits: int
    def __init__(self, physical: _Optional[int] = ..., logical: _Optional[int] = ..., suffix_bits: _Optional[int] = ...) -> None: ...

class TsoRequest(_message.Message):
    __slots__ = ("header", "count", "dc_location")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DC_LOCATION_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    count: int
    dc_location: str
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., count: _Optional[int] = ..., dc_location: _Optional[str] = ...) -> None: ...

class TsoResponse(_message.Message):
    __slots__ = ("header", "count", "timestamp")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    count: int
    timestamp: Timestamp
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., count: _Optional[int] = ..., timestamp: _Optional[_Union[Timestamp, _Mapping]] = ...) -> None: ...

class GetStoreRequest(_message.Message):
    __slots__ = ("header", "store_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    store_id: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., store_id: _Optional[int] = ...) -> None: ...

class GetStoreResponse(_message.Message):
    __slots__ = ("header", "store")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    store: _metapb_pb2.Store
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., store: _Optional[_Union[_metapb_pb2.Store, _Mapping]] = ...) -> None: ...

class GetAllStoresRequest(_message.Message):
    __slots__ = ("header", "exclude_tombstone_stores")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_TOMBSTONE_STORES_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    exclude_tombstone_stores: bool
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., exclude_tombstone_stores: _Optional[bool] = ...) -> None: ...

class GetAllStoresResponse(_message.Message):
    __slots__ = ("header", "stores")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    stores: _containers.RepeatedCompositeFieldContainer[_metapb_pb2.Store]
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., stores: _Optional[_Iterable[_Union[_metapb_pb2.Store, _Mapping]]] = ...) -> None: ...

class GetRegionRequest(_message.Message):
    __slots__ = ("header", "region_key")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_KEY_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    region_key: bytes
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., region_key: _Optional[bytes] = ...) -> None: ...

class GetRegionResponse(_message.Message):
    __slots__ = ("header", "region", "leader")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    region: _metapb_pb2.Region
    leader: _metapb_pb2.Peer
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., region: _Optional[_Union[_metapb_pb2.Region, _Mapping]] = ..., leader: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ...) -> None: ...

class GetRegionByIDRequest(_message.Message):
    __slots__ = ("header", "region_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    region_id: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., region_id: _Optional[int] = ...) -> None: ...

class ScanRegionsRequest(_message.Message):
    __slots__ = ("header", "start_key", "limit", "end_key")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    start_key: bytes
    limit: int
    end_key: bytes
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., start_key: _Optional[bytes] = ..., limit: _Optional[int] = ..., end_key: _Optional[bytes] = ...) -> None: ...

class Region(_message.Message):
    __slots__ = ("region", "leader")
    REGION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    region: _metapb_pb2.Region
    leader: _metapb_pb2.Peer
    def __init__(self, region: _Optional[_Union[_metapb_pb2.Region, _Mapping]] = ..., leader: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ...) -> None: ...

class ScanRegionsResponse(_message.Message):
    __slots__ = ("header", "region_metas", "leaders", "regions")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_METAS_FIELD_NUMBER: _ClassVar[int]
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    region_metas: _containers.RepeatedCompositeFieldContainer[_metapb_pb2.Region]
    leaders: _containers.RepeatedCompositeFieldContainer[_metapb_pb2.Peer]
    regions: _containers.RepeatedCompositeFieldContainer[Region]
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., region_metas: _Optional[_Iterable[_Union[_metapb_pb2.Region, _Mapping]]] = ..., leaders: _Optional[_Iterable[_Union[_metapb_pb2.Peer, _Mapping]]] = ..., regions: _Optional[_Iterable[_Union[Region, _Mapping]]] = ...) -> None: ...

class GetGCSafePointRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ...) -> None: ...

class GetGCSafePointResponse(_message.Message):
    __slots__ = ("header", "safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    safe_point: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., safe_point: _Optional[int] = ...) -> None: ...

class UpdateGCSafePointRequest(_message.Message):
    __slots__ = ("header", "safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    safe_point: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., safe_point: _Optional[int] = ...) -> None: ...

class UpdateGCSafePointResponse(_message.Message):
    __slots__ = ("header", "new_safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    NEW_SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    new_safe_point: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., new_safe_point: _Optional[int] = ...) -> None: ...

class UpdateServiceGCSafePointRequest(_message.Message):
    __slots__ = ("header", "service_id", "TTL", "safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    service_id: bytes
    TTL: int
    safe_point: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., service_id: _Optional[bytes] = ..., TTL: _Optional[int] = ..., safe_point: _Optional[int] = ...) -> None: ...

class UpdateServiceGCSafePointResponse(_message.Message):
    __slots__ = ("header", "service_id", "TTL", "min_safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    MIN_SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    service_id: bytes
    TTL: int
    min_safe_point: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., service_id: _Optional[bytes] = ..., TTL: _Optional[int] = ..., min_safe_point: _Optional[int] = ...) -> None: ...
