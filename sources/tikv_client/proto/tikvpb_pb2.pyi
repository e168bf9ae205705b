from cdcflow.sources.tikv_client.proto import kvrpcpb_pb2 as _kvrpcpb_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
