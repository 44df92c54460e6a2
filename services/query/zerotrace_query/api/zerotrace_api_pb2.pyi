from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListSpansRequest(_message.Message):
    __slots__ = ("kind", "service", "pid", "start_ns_from", "start_ns_to", "limit")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FROM_FIELD_NUMBER: _ClassVar[int]
    START_NS_TO_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    service: str
    pid: int
    start_ns_from: int
    start_ns_to: int
    limit: int
    def __init__(self, kind: _Optional[str] = ..., service: _Optional[str] = ..., pid: _Optional[int] = ..., start_ns_from: _Optional[int] = ..., start_ns_to: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class Span(_message.Message):
    __slots__ = ("span_id", "trace_id", "node_id", "pid", "tid", "process_name", "service", "kind", "name", "start_ns", "end_ns", "status", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    span_id: str
    trace_id: str
    node_id: str
    pid: int
    tid: int
    process_name: str
    service: str
    kind: str
    name: str
    start_ns: int
    end_ns: int
    status: str
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, span_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., node_id: _Optional[str] = ..., pid: _Optional[int] = ..., tid: _Optional[int] = ..., process_name: _Optional[str] = ..., service: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., status: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListSpansResponse(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[Span]
    def __init__(self, spans: _Optional[_Iterable[_Union[Span, _Mapping]]] = ...) -> None: ...
