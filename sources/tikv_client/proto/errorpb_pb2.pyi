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
    __slots__ = ("reason", "backoff_ms", "estimated_wait_ms", "applied_index")
    REASON_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    reason: str
    backoff_ms: int
    estimated_wait_ms: int
    applied_index: int
    def __init__(self, reason: _Optional[str] = ..., backoff_ms: _Optional[int] = ..., estimated_wait_ms: _Optional[int] = ..., applied_index: _Optional[int] = ...) -> None: ...

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

class RaftEntryTooLarge(_message.Message):
    __slots__ = ("region_id", "entry_size")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_SIZE_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    entry_size: int
    def __init__(self, region_id: _Optional[int] = ..., entry_size: _Optional[int] = ...) -> None: ...

class MaxTimestampNotSynced(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadIndexNotReady(_message.Message):
    __slots__ = ("reason", "region_id")
    REASON_FIELD_NUMBER: _ClassVar[int]
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    region_id: int
    def __init__(self, reason: _Optional[str] = ..., region_id: _Optional[int] = ...) -> None: ...

class ProposalInMergingMode(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class DataIsNotReady(_message.Message):
    __slots__ = ("region_id", "peer_id", "safe_ts")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    SAFE_TS_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    peer_id: int
    safe_ts: int
    def __init__(self, region_id: _Optional[int] = ..., peer_id: _Optional[int] = ..., safe_ts: _Optional[int] = ...) -> None: ...

class RegionNotInitialized(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class DiskFull(_message.Message):
    __slots__ = ("store_id", "reason")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    store_id: _containers.RepeatedScalarFieldContainer[int]
    reason: str
    def __init__(self, store_id: _Optional[_Iterable[int]] = ..., reason: _Optional[str] = ...) -> None: ...

class RecoveryInProgress(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class FlashbackInProgress(_message.Message):
    __slots__ = ("region_id", "flashback_start_ts")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    FLASHBACK_START_TS_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    flashback_start_ts: int
    def __init__(self, region_id: _Optional[int] = ..., flashback_start_ts: _Optional[int] = ...) -> None: ...

class FlashbackNotPrepared(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class IsWitness(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class MismatchPeerId(_message.Message):
    __slots__ = ("request_peer_id", "store_peer_id")
    REQUEST_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    request_peer_id: int
    store_peer_id: int
    def __init__(self, request_peer_id: _Optional[int] = ..., store_peer_id: _Optional[int] = ...) -> None: ...

class BucketVersionNotMatch(_message.Message):
    __slots__ = ("version", "keys")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    version: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, version: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class UndeterminedResult(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("message", "not_leader", "region_not_found", "key_not_in_region", "epoch_not_match", "server_is_busy", "stale_command", "store_not_match", "raft_entry_too_large", "max_timestamp_not_synced", "read_index_not_ready", "proposal_in_merging_mode", "data_is_not_ready", "region_not_initialized", "disk_full", "RecoveryInProgress", "FlashbackInProgress", "FlashbackNotPrepared", "is_witness", "mismatch_peer_id", "bucket_version_not_match", "undetermined_result")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NOT_LEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    KEY_NOT_IN_REGION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    SERVER_IS_BUSY_FIELD_NUMBER: _ClassVar[int]
    STALE_COMMAND_FIELD_NUMBER: _ClassVar[int]
    STORE_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    RAFT_ENTRY_TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_NOT_SYNCED_FIELD_NUMBER: _ClassVar[int]
    READ_INDEX_NOT_READY_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_IN_MERGING_MODE_FIELD_NUMBER: _ClassVar[int]
    DATA_IS_NOT_READY_FIELD_NUMBER: _ClassVar[int]
    REGION_NOT_INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    RECOVERYINPROGRESS_FIELD_NUMBER: _ClassVar[int]
    FLASHBACKINPROGRESS_FIELD_NUMBER: _ClassVar[int]
    FLASHBACKNOTPREPARED_FIELD_NUMBER: _ClassVar[int]
    IS_WITNESS_FIELD_NUMBER: _ClassVar[int]
    MISMATCH_PEER_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_VERSION_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    UNDETERMINED_RESULT_FIELD_NUMBER: _ClassVar[int]
    message: str
    not_leader: NotLeader
    region_not_found: RegionNotFound
    key_not_in_region: KeyNotInRegion
    epoch_not_match: EpochNotMatch
    server_is_busy: ServerIsBusy
    stale_command: StaleCommand
    store_not_match: StoreNotMatch
    raft_entry_too_large: RaftEntryTooLarge
    max_timestamp_not_synced: MaxTimestampNotSynced
    read_index_not_ready: ReadIndexNotReady
    proposal_in_merging_mode: ProposalInMergingMode
    data_is_not_ready: DataIsNotReady
    region_not_initialized: RegionNotInitialized
    disk_full: DiskFull
    RecoveryInProgress: RecoveryInProgress
    FlashbackInProgress: FlashbackInProgress
    FlashbackNotPrepared: FlashbackNotPrepared
    is_witness: IsWitness
    mismatch_peer_id: MismatchPeerId
    bucket_version_not_match: BucketVersionNotMatch
    undetermined_result: UndeterminedResult
    def __init__(self, message: _Optional[str] = ..., not_leader: _Optional[_Union[NotLeader, _Mapping]] = ..., region_not_found: _Optional[_Union[RegionNotFound, _Mapping]] = ..., key_not_in_region: _Optional[_Union[KeyNotInRegion, _Mapping]] = ..., epoch_not_match: _Optional[_Union[EpochNotMatch, _Mapping]] = ..., server_is_busy: _Optional[_Union[ServerIsBusy, _Mapping]] = ..., stale_command: _Optional[_Union[StaleCommand, _Mapping]] = ..., store_not_match: _Optional[_Union[StoreNotMatch, _Mapping]] = ..., raft_entry_too_large: _Optional[_Union[RaftEntryTooLarge, _Mapping]] = ..., max_timestamp_not_synced: _Optional[_Union[MaxTimestampNotSynced, _Mapping]] = ..., read_index_not_ready: _Optional[_Union[ReadIndexNotReady, _Mapping]] = ..., proposal_in_merging_mode: _Optional[_Union[ProposalInMergingMode, _Mapping]] = ..., data_is_not_ready: _Optional[_Union[DataIsNotReady, _Mapping]] = ..., region_not_initialized: _Optional[_Union[RegionNotInitialized, _Mapping]] = ..., disk_full: _Optional[_Union[DiskFull, _Mapping]] = ..., RecoveryInProgress: _Optional[_Union[RecoveryInProgress, _Mapping]] = ..., FlashbackInProgress: _Optional[_Union[FlashbackInProgress, _Mapping]] = ..., FlashbackNotPrepared: _Optional[_Union[FlashbackNotPrepared, _Mapping]] = ..., is_witness: _Optional[_Union[IsWitness, _Mapping]] = ..., mismatch_peer_id: _Optional[_Union[MismatchPeerId, _Mapping]] = ..., bucket_version_not_match: _Optional[_Union[BucketVersionNotMatch, _Mapping]] = ..., undetermined_result: _Optional[_Union[UndeterminedResult, _Mapping]] = ...) -> None: ...
