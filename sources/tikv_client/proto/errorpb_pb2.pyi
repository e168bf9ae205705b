from cdcflow.sources.tikv_client.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NotLeader(_message.Message):
    __slots__ = ("region_id", "leader")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    leader: _metapb_pb2.Peer
    def __init__(self, region_id: _Optional[int] = ..., leader: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ...) -> None: ...

class RegionNotFound(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class KeyNotInRegion(_message.Message):
    __slots__ = ("key", "region_id", "start_key", "end_key")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    region_id: int
    start_key: bytes
    end_key: bytes
    def __init__(self, key: _Optional[bytes] = ..., region_id: _Optional[int] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ...) -> None: ...

class EpochNotMatch(_message.Message):
    __slots__ = ("current_regions",)
    CURRENT_REGIONS_FIELD_NUMBER: _ClassVar[int]
    current_regions: _containers.RepeatedCompositeFieldContainer[_metapb_pb2.Region]
    def __init__(self, current_regions: _Optional[_Iterable[_Union[_metapb_pb2.Region, _Mapping]]] = ...) -> None: ...

class ServerIsBusy(_message.Message):
    __slots__ = ("reason", "backoff_ms")
    REASON_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    backoff_ms: int
    def __init__(self, reason: _Optional[str] = ..., backoff_ms: _Optional[int] = ...) -> None: ...

class StaleCommand(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoreNotMatch(_message.Message):
    __slots__ = ("request_store_id", "actual_store_id")
    REQUEST_STORE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_STORE_ID_FIELD_NUMBER: _ClassVar[int]
    request_store_id: int
    actual_store_id: int
    def __init__(self, request_store_id: _Optional[int] = ..., actual_store_id: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("message", "not_leader", "region_not_found", "key_not_in_region", "epoch_not_match", "server_is_busy", "stale_command", "store_not_match")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NOT_LEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    KEY_NOT_IN_REGION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    SERVER_IS_BUSY_FIELD_NUMBER: _ClassVar[int]
    STALE_COMMAND_FIELD_NUMBER: _ClassVar[int]
    STORE_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    message: str
    not_leader: NotLeader
    region_not_found: RegionNotFound
    key_not_in_region: KeyNotInRegion
    epoch_not_match: EpochNotMatch
    server_is_busy: ServerIsBusy
    stale_command: StaleCommand
    store_not_match: StoreNotMatch
    def __init__(self, message: _Optional[str] = ..., not_leader: _Optional[_Union[NotLeader, _Mapping]] = ..., region_not_found: _Optional[_Union[RegionNotFound, _Mapping]] = ..., key_not_in_region: _Optional[_Union[KeyNotInRegion, _Mapping]] = ..., epoch_not_match: _Optional[_Union[EpochNotMatch, _Mapping]] = ..., server_is_busy: _Optional[_Union[ServerIsBusy, _Mapping]] = ..., stale_command: _Optional[_Union[StaleCommand, _Mapping]] = ..., store_not_match: _Optional[_Union[StoreNotMatch, _Mapping]] = ...) -> None: ...
