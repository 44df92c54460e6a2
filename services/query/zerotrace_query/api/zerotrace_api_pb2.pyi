from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf.internal import containers as _containers

DESCRIPTOR: _descriptor.FileDescriptor

class ListSpansRequest(_message.Message):
    __slots__ = ("kind", "limit", "pid", "service", "start_ns_from", "start_ns_to")
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
    def __init__(
        self,
        kind: str | None = ...,
        service: str | None = ...,
        pid: int | None = ...,
        start_ns_from: int | None = ...,
        start_ns_to: int | None = ...,
        limit: int | None = ...,
    ) -> None: ...

class Span(_message.Message):
    __slots__ = (
        "attributes",
        "end_ns",
        "kind",
        "name",
        "node_id",
        "pid",
        "process_name",
        "service",
        "span_id",
        "start_ns",
        "status",
        "tid",
        "trace_id",
    )
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...

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
    def __init__(
        self,
        span_id: str | None = ...,
        trace_id: str | None = ...,
        node_id: str | None = ...,
        pid: int | None = ...,
        tid: int | None = ...,
        process_name: str | None = ...,
        service: str | None = ...,
        kind: str | None = ...,
        name: str | None = ...,
        start_ns: int | None = ...,
        end_ns: int | None = ...,
        status: str | None = ...,
        attributes: _Mapping[str, str] | None = ...,
    ) -> None: ...

class ListSpansResponse(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[Span]
    def __init__(self, spans: _Iterable[Span | _Mapping] | None = ...) -> None: ...
