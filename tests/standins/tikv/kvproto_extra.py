"""Messages the stand-in serves beyond cdcflow's own kvproto subset, for clients such as client-go.

cdcflow's protos (``cdcflow.sources.tikv_client.proto``) hold only what cdcflow sends. tikv/client-go
also sends ``tikvpb.Tikv/BatchCommands`` (every RawKV command it can batch goes through it while
``tikv-client.max-batch-size`` > 0, the default 128: client-go v2.0.4 internal/client/client.go:493,
config/client.go:134), ``RawGetKeyTTL``, and checks a store it could not reach with
``grpc.health.v1.Health/Check`` (internal/locate/region_cache.go:2551-2570). These messages are
built here from their descriptors, with the field numbers of pingcap/kvproto 621ec37a (the version
client-go v2.0.4 pins: proto/tikvpb.proto 119-223, proto/kvrpcpb.proto 1289-1300) and of gRPC's
health/v1/health.proto, so nothing generated is kept for tests. Only the RawKV commands the
stand-in serves are declared in the batch oneofs: any other command arrives as an unknown field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from cdcflow.sources.tikv_client.proto import errorpb_pb2, kvrpcpb_pb2

_FIELD = descriptor_pb2.FieldDescriptorProto

# kvproto proto/tikvpb.proto: BatchCommandsRequest.Request / Response oneof ``cmd`` numbers.
BATCHED_RAW_COMMANDS = {
    "RawGet": 13,
    "RawBatchGet": 14,
    "RawPut": 15,
    "RawBatchPut": 16,
    "RawDelete": 17,
    "RawBatchDelete": 18,
    "RawScan": 19,
    "RawDeleteRange": 20,
}


def _message_field(name: str, number: int, type_name: str, oneof: int | None = None) -> _FIELD:
    field = _FIELD(name=name, number=number, type=_FIELD.TYPE_MESSAGE, type_name=type_name, label=_FIELD.LABEL_OPTIONAL)
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _scalar(name: str, number: int, kind: int, repeated: bool = False) -> _FIELD:
    label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
    return _FIELD(name=name, number=number, type=kind, label=label)


def _batch(name: str, suffix: str, extra: list[_FIELD]) -> descriptor_pb2.DescriptorProto:
    """``BatchCommands{Request,Response}`` with its nested ``Request``/``Response`` of one oneof."""
    nested = descriptor_pb2.DescriptorProto(name=suffix, oneof_decl=[descriptor_pb2.OneofDescriptorProto(name="cmd")])
    nested.field.extend(
        _message_field(command, number, f".kvrpcpb.{command}{suffix}", oneof=0)
        for command, number in BATCHED_RAW_COMMANDS.items()
    )
    outer = descriptor_pb2.DescriptorProto(name=name, nested_type=[nested])
    outer.field.append(
        _FIELD(
            name=f"{suffix.lower()}s",
            number=1,
            type=_FIELD.TYPE_MESSAGE,
            type_name=f".tikvpb.{name}.{suffix}",
            label=_FIELD.LABEL_REPEATED,
        )
    )
    outer.field.append(_scalar("request_ids", 2, _FIELD.TYPE_UINT64, repeated=True))
    outer.field.extend(extra)
    return outer


def _files() -> list[descriptor_pb2.FileDescriptorProto]:
    kvrpcpb = descriptor_pb2.FileDescriptorProto(
        name="tests/standins/tikv/kvrpcpb_extra.proto",
        package="kvrpcpb",
        syntax="proto3",
        dependency=[kvrpcpb_pb2.DESCRIPTOR.name, errorpb_pb2.DESCRIPTOR.name],
    )
    kvrpcpb.message_type.add(name="RawGetKeyTTLRequest").field.extend(
        [
            _message_field("context", 1, ".kvrpcpb.Context"),
            _scalar("key", 2, _FIELD.TYPE_BYTES),
            _scalar("cf", 3, _FIELD.TYPE_STRING),
        ]
    )
    kvrpcpb.message_type.add(name="RawGetKeyTTLResponse").field.extend(
        [
            _message_field("region_error", 1, ".errorpb.Error"),
            _scalar("error", 2, _FIELD.TYPE_STRING),
            _scalar("ttl", 3, _FIELD.TYPE_UINT64),
            _scalar("not_found", 4, _FIELD.TYPE_BOOL),
        ]
    )
    tikvpb = descriptor_pb2.FileDescriptorProto(
        name="tests/standins/tikv/tikvpb_batch.proto",
        package="tikvpb",
        syntax="proto3",
        dependency=[kvrpcpb_pb2.DESCRIPTOR.name],
    )
    tikvpb.message_type.extend(
        [
            _batch("BatchCommandsRequest", "Request", []),
            _batch("BatchCommandsResponse", "Response", [_scalar("transport_layer_load", 3, _FIELD.TYPE_UINT64)]),
        ]
    )
    health = descriptor_pb2.FileDescriptorProto(name="tests/standins/tikv/health.proto", package="grpc.health.v1")
    health.syntax = "proto3"
    health.message_type.add(name="HealthCheckRequest").field.append(_scalar("service", 1, _FIELD.TYPE_STRING))
    health.enum_type.add(name="ServingStatus").value.extend(
        descriptor_pb2.EnumValueDescriptorProto(name=name, number=number)
        for number, name in enumerate(["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"])
    )
    health.message_type.add(name="HealthCheckResponse").field.append(
        _FIELD(
            name="status",
            number=1,
            type=_FIELD.TYPE_ENUM,
            type_name=".grpc.health.v1.ServingStatus",
            label=_FIELD.LABEL_OPTIONAL,
        )
    )
    return [kvrpcpb, tikvpb, health]


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.Default()
    for file in _files():
        try:
            pool.FindFileByName(file.name)
        except KeyError:
            pool.Add(file)
    names = [
        "kvrpcpb.RawGetKeyTTLRequest",
        "kvrpcpb.RawGetKeyTTLResponse",
        "tikvpb.BatchCommandsRequest",
        "tikvpb.BatchCommandsResponse",
        "grpc.health.v1.HealthCheckRequest",
        "grpc.health.v1.HealthCheckResponse",
    ]
    return {name.rsplit(".", 1)[1]: message_factory.GetMessageClass(pool.FindMessageTypeByName(name)) for name in names}


_CLASSES = _classes()
RawGetKeyTTLRequest: type[Message] = _CLASSES["RawGetKeyTTLRequest"]
RawGetKeyTTLResponse: type[Message] = _CLASSES["RawGetKeyTTLResponse"]
BatchCommandsRequest: type[Message] = _CLASSES["BatchCommandsRequest"]
BatchCommandsResponse: type[Message] = _CLASSES["BatchCommandsResponse"]
HealthCheckRequest: type[Message] = _CLASSES["HealthCheckRequest"]
HealthCheckResponse: type[Message] = _CLASSES["HealthCheckResponse"]
SERVING = 1
