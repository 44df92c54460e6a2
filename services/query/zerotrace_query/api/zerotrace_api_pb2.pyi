from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListSpansRequest(_message.Message):
    __slots__ = ("kind", "service", "pid", "start_ns_from", "start_ns_to", "limit", "protocol", "status", "min_duration_ns", "max_duration_ns")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FROM_FIELD_NUMBER: _ClassVar[int]
    START_NS_TO_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MIN_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    service: str
    pid: int
    start_ns_from: int
    start_ns_to: int
    limit: int
    protocol: str
    status: str
    min_duration_ns: int
    max_duration_ns: int
    def __init__(self, kind: _Optional[str] = ..., service: _Optional[str] = ..., pid: _Optional[int] = ..., start_ns_from: _Optional[int] = ..., start_ns_to: _Optional[int] = ..., limit: _Optional[int] = ..., protocol: _Optional[str] = ..., status: _Optional[str] = ..., min_duration_ns: _Optional[int] = ..., max_duration_ns: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("spans", "total")
    SPANS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[Span]
    total: int
    def __init__(self, spans: _Optional[_Iterable[_Union[Span, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class ProtocolLatency(_message.Message):
    __slots__ = ("protocol", "count", "errors", "buckets", "p50_ns", "p90_ns", "p99_ns")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    P50_NS_FIELD_NUMBER: _ClassVar[int]
    P90_NS_FIELD_NUMBER: _ClassVar[int]
    P99_NS_FIELD_NUMBER: _ClassVar[int]
    protocol: str
    count: int
    errors: int
    buckets: _containers.RepeatedScalarFieldContainer[int]
    p50_ns: int
    p90_ns: int
    p99_ns: int
    def __init__(self, protocol: _Optional[str] = ..., count: _Optional[int] = ..., errors: _Optional[int] = ..., buckets: _Optional[_Iterable[int]] = ..., p50_ns: _Optional[int] = ..., p90_ns: _Optional[int] = ..., p99_ns: _Optional[int] = ...) -> None: ...

class SpanHistogramsResponse(_message.Message):
    __slots__ = ("edges_ns", "protocols")
    EDGES_NS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    edges_ns: _containers.RepeatedScalarFieldContainer[int]
    protocols: _containers.RepeatedCompositeFieldContainer[ProtocolLatency]
    def __init__(self, edges_ns: _Optional[_Iterable[int]] = ..., protocols: _Optional[_Iterable[_Union[ProtocolLatency, _Mapping]]] = ...) -> None: ...

class LlmFilter(_message.Message):
    __slots__ = ("model", "service", "status", "start_ns_from", "start_ns_to", "limit", "bucket_s", "observation_point")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FROM_FIELD_NUMBER: _ClassVar[int]
    START_NS_TO_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BUCKET_S_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_POINT_FIELD_NUMBER: _ClassVar[int]
    model: str
    service: str
    status: str
    start_ns_from: int
    start_ns_to: int
    limit: int
    bucket_s: float
    observation_point: str
    def __init__(self, model: _Optional[str] = ..., service: _Optional[str] = ..., status: _Optional[str] = ..., start_ns_from: _Optional[int] = ..., start_ns_to: _Optional[int] = ..., limit: _Optional[int] = ..., bucket_s: _Optional[float] = ..., observation_point: _Optional[str] = ...) -> None: ...

class LlmRequest(_message.Message):
    __slots__ = ("request_id", "span_id", "node_id", "service", "observation_point", "model", "endpoint", "stream", "start_ns", "end_ns", "ttft_ns", "tpot_ns", "input_tokens", "output_tokens", "output_tokens_estimated", "finish_reason", "error", "tokens_per_s", "status_code", "path", "pid", "status", "also_seen_at", "client_gap_ns", "gpu_time_ns", "gpu_launches", "gpu_memory_byte_s", "gpu_cost_method", "gpu_cost_partial")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_POINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    TTFT_NS_FIELD_NUMBER: _ClassVar[int]
    TPOT_NS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ALSO_SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_GAP_NS_FIELD_NUMBER: _ClassVar[int]
    GPU_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    GPU_LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTE_S_FIELD_NUMBER: _ClassVar[int]
    GPU_COST_METHOD_FIELD_NUMBER: _ClassVar[int]
    GPU_COST_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    span_id: str
    node_id: str
    service: str
    observation_point: str
    model: str
    endpoint: str
    stream: bool
    start_ns: int
    end_ns: int
    ttft_ns: int
    tpot_ns: int
    input_tokens: int
    output_tokens: int
    output_tokens_estimated: bool
    finish_reason: str
    error: str
    tokens_per_s: float
    status_code: int
    path: str
    pid: int
    status: str
    also_seen_at: _containers.RepeatedCompositeFieldContainer[LlmObservation]
    client_gap_ns: LlmClientGap
    gpu_time_ns: int
    gpu_launches: float
    gpu_memory_byte_s: float
    gpu_cost_method: str
    gpu_cost_partial: bool
    def __init__(self, request_id: _Optional[str] = ..., span_id: _Optional[str] = ..., node_id: _Optional[str] = ..., service: _Optional[str] = ..., observation_point: _Optional[str] = ..., model: _Optional[str] = ..., endpoint: _Optional[str] = ..., stream: _Optional[bool] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., ttft_ns: _Optional[int] = ..., tpot_ns: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., output_tokens_estimated: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., error: _Optional[str] = ..., tokens_per_s: _Optional[float] = ..., status_code: _Optional[int] = ..., path: _Optional[str] = ..., pid: _Optional[int] = ..., status: _Optional[str] = ..., also_seen_at: _Optional[_Iterable[_Union[LlmObservation, _Mapping]]] = ..., client_gap_ns: _Optional[_Union[LlmClientGap, _Mapping]] = ..., gpu_time_ns: _Optional[int] = ..., gpu_launches: _Optional[float] = ..., gpu_memory_byte_s: _Optional[float] = ..., gpu_cost_method: _Optional[str] = ..., gpu_cost_partial: _Optional[bool] = ...) -> None: ...

class LlmObservation(_message.Message):
    __slots__ = ("observation_point", "span_id", "service", "node_id", "start_ns", "end_ns", "ttft_ns")
    OBSERVATION_POINT_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    TTFT_NS_FIELD_NUMBER: _ClassVar[int]
    observation_point: str
    span_id: str
    service: str
    node_id: str
    start_ns: int
    end_ns: int
    ttft_ns: int
    def __init__(self, observation_point: _Optional[str] = ..., span_id: _Optional[str] = ..., service: _Optional[str] = ..., node_id: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., ttft_ns: _Optional[int] = ...) -> None: ...

class LlmClientGap(_message.Message):
    __slots__ = ("start", "ttft", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    TTFT_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    ttft: int
    end: int
    def __init__(self, start: _Optional[int] = ..., ttft: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class Coverage(_message.Message):
    __slots__ = ("count", "total", "limit", "truncated", "complete_from_ns", "warning", "counted", "seen_at_both", "records", "total_records", "pairing_complete")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FROM_NS_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    SEEN_AT_BOTH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PAIRING_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    count: int
    total: int
    limit: int
    truncated: bool
    complete_from_ns: int
    warning: str
    counted: str
    seen_at_both: int
    records: int
    total_records: int
    pairing_complete: bool
    def __init__(self, count: _Optional[int] = ..., total: _Optional[int] = ..., limit: _Optional[int] = ..., truncated: _Optional[bool] = ..., complete_from_ns: _Optional[int] = ..., warning: _Optional[str] = ..., counted: _Optional[str] = ..., seen_at_both: _Optional[int] = ..., records: _Optional[int] = ..., total_records: _Optional[int] = ..., pairing_complete: _Optional[bool] = ...) -> None: ...

class ListLlmRequestsResponse(_message.Message):
    __slots__ = ("requests", "coverage")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[LlmRequest]
    coverage: Coverage
    def __init__(self, requests: _Optional[_Iterable[_Union[LlmRequest, _Mapping]]] = ..., coverage: _Optional[_Union[Coverage, _Mapping]] = ...) -> None: ...

class Percentiles(_message.Message):
    __slots__ = ("p50", "p90", "p99")
    P50_FIELD_NUMBER: _ClassVar[int]
    P90_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    p50: float
    p90: float
    p99: float
    def __init__(self, p50: _Optional[float] = ..., p90: _Optional[float] = ..., p99: _Optional[float] = ...) -> None: ...

class LlmPercentileBucket(_message.Message):
    __slots__ = ("start_ns", "count", "errors", "ttft_ns", "tpot_ns", "tokens_per_s", "output_tokens", "throughput_tokens_per_s")
    START_NS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    TTFT_NS_FIELD_NUMBER: _ClassVar[int]
    TPOT_NS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    start_ns: int
    count: int
    errors: int
    ttft_ns: Percentiles
    tpot_ns: Percentiles
    tokens_per_s: Percentiles
    output_tokens: int
    throughput_tokens_per_s: float
    def __init__(self, start_ns: _Optional[int] = ..., count: _Optional[int] = ..., errors: _Optional[int] = ..., ttft_ns: _Optional[_Union[Percentiles, _Mapping]] = ..., tpot_ns: _Optional[_Union[Percentiles, _Mapping]] = ..., tokens_per_s: _Optional[_Union[Percentiles, _Mapping]] = ..., output_tokens: _Optional[int] = ..., throughput_tokens_per_s: _Optional[float] = ...) -> None: ...

class LlmPercentileSeries(_message.Message):
    __slots__ = ("model", "service", "count", "errors", "ttft_ns", "tpot_ns", "tokens_per_s", "buckets")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    TTFT_NS_FIELD_NUMBER: _ClassVar[int]
    TPOT_NS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    model: str
    service: str
    count: int
    errors: int
    ttft_ns: Percentiles
    tpot_ns: Percentiles
    tokens_per_s: Percentiles
    buckets: _containers.RepeatedCompositeFieldContainer[LlmPercentileBucket]
    def __init__(self, model: _Optional[str] = ..., service: _Optional[str] = ..., count: _Optional[int] = ..., errors: _Optional[int] = ..., ttft_ns: _Optional[_Union[Percentiles, _Mapping]] = ..., tpot_ns: _Optional[_Union[Percentiles, _Mapping]] = ..., tokens_per_s: _Optional[_Union[Percentiles, _Mapping]] = ..., buckets: _Optional[_Iterable[_Union[LlmPercentileBucket, _Mapping]]] = ...) -> None: ...

class LlmPercentilesResponse(_message.Message):
    __slots__ = ("bucket_ns", "from_ns", "to_ns", "coverage", "series")
    BUCKET_NS_FIELD_NUMBER: _ClassVar[int]
    FROM_NS_FIELD_NUMBER: _ClassVar[int]
    TO_NS_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    bucket_ns: int
    from_ns: int
    to_ns: int
    coverage: Coverage
    series: _containers.RepeatedCompositeFieldContainer[LlmPercentileSeries]
    def __init__(self, bucket_ns: _Optional[int] = ..., from_ns: _Optional[int] = ..., to_ns: _Optional[int] = ..., coverage: _Optional[_Union[Coverage, _Mapping]] = ..., series: _Optional[_Iterable[_Union[LlmPercentileSeries, _Mapping]]] = ...) -> None: ...

class LlmConcurrencyBucket(_message.Message):
    __slots__ = ("start_ns", "max", "mean")
    START_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    start_ns: int
    max: int
    mean: float
    def __init__(self, start_ns: _Optional[int] = ..., max: _Optional[int] = ..., mean: _Optional[float] = ...) -> None: ...

class LlmConcurrencySeries(_message.Message):
    __slots__ = ("model", "service", "buckets")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    model: str
    service: str
    buckets: _containers.RepeatedCompositeFieldContainer[LlmConcurrencyBucket]
    def __init__(self, model: _Optional[str] = ..., service: _Optional[str] = ..., buckets: _Optional[_Iterable[_Union[LlmConcurrencyBucket, _Mapping]]] = ...) -> None: ...

class LlmConcurrencyResponse(_message.Message):
    __slots__ = ("bucket_ns", "from_ns", "to_ns", "coverage", "series")
    BUCKET_NS_FIELD_NUMBER: _ClassVar[int]
    FROM_NS_FIELD_NUMBER: _ClassVar[int]
    TO_NS_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    bucket_ns: int
    from_ns: int
    to_ns: int
    coverage: Coverage
    series: _containers.RepeatedCompositeFieldContainer[LlmConcurrencySeries]
    def __init__(self, bucket_ns: _Optional[int] = ..., from_ns: _Optional[int] = ..., to_ns: _Optional[int] = ..., coverage: _Optional[_Union[Coverage, _Mapping]] = ..., series: _Optional[_Iterable[_Union[LlmConcurrencySeries, _Mapping]]] = ...) -> None: ...
