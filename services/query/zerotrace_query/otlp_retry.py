"""When an OTLP export is sent again, and after how long (pure).

The rules are OTLP's (opentelemetry-proto, docs/specification.md, "Failures" and
"Throttling"):

- OTLP/HTTP: 429, 502, 503 and 504 are tried again, after the `Retry-After` the receiver
  sent (seconds, or an HTTP date) when it sent one; any other answer is final (a 400 means
  the receiver will never take these bytes).
- OTLP/gRPC: CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE and DATA_LOSS
  are tried again; RESOURCE_EXHAUSTED only when the receiver says it can recover, by a
  google.rpc.RetryInfo in the status details (the `grpc-status-details-bin` trailer; a
  client's own "message too large" is RESOURCE_EXHAUSTED too, and never heals). The
  RetryInfo's delay is honoured.
- A connection that failed (refused, reset, timed out) is tried again, as a 503 would be.
- With no delay from the receiver: exponential backoff, 1 s doubling to at most 32 s (the
  OpenTelemetry SDKs' schedule), without jitter.

Every attempt of one request shares one deadline (`Budget`): a wait that would end past it
is not waited, and the export gives up at once with what the receiver last said. Backoff,
Budget, Retry-After and the attempt loop are every exporter's: retry_policy; this module
holds what only OTLP says (its status lists, gRPC's RetryInfo and google.rpc.Status).
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, duration_pb2
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from zerotrace_query import retry_policy
from zerotrace_query.retry_policy import NS_PER_S

# The shared rules, importable from here too, as OTLP's callers have always imported them.
from zerotrace_query.retry_policy import Backoff as Backoff
from zerotrace_query.retry_policy import Budget as Budget
from zerotrace_query.retry_policy import retry_after_s as retry_after_s

RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
RETRYABLE_GRPC = frozenset(
    {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"}
)
GRPC_RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
# The trailer a gRPC server puts its google.rpc.Status (with details) in.
GRPC_STATUS_DETAILS_KEY = "grpc-status-details-bin"
RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo"


def http_wait_s(
    status: int, retry_after: str | None, attempt: int, now_ns: int, backoff: Backoff
) -> float | None:
    """How long to wait before sending again after this HTTP answer; None: do not."""
    return retry_policy.http_wait_s(status, retry_after, attempt, now_ns, backoff, RETRYABLE_HTTP)


def grpc_wait_s(
    code: str, retry_delay_s: float | None, attempt: int, backoff: Backoff
) -> float | None:
    """How long to wait after this gRPC status (its name: "UNAVAILABLE") and the RetryInfo
    delay that came with it, if any; None: do not send again."""
    if code == GRPC_RESOURCE_EXHAUSTED and retry_delay_s is None:
        return None
    if code not in RETRYABLE_GRPC and code != GRPC_RESOURCE_EXHAUSTED:
        return None
    return backoff.delay_s(attempt) if retry_delay_s is None else retry_delay_s


def _rpc_file() -> descriptor_pb2.FileDescriptorProto:
    """google.rpc.Status (google/rpc/status.proto) and google.rpc.RetryInfo
    (google/rpc/error_details.proto), field for field: the two messages OTLP's throttling
    uses, declared here so no googleapis package is needed for them."""
    field = descriptor_pb2.FieldDescriptorProto
    rpc = descriptor_pb2.FileDescriptorProto(
        name="zerotrace/google_rpc_status.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=[any_pb2.DESCRIPTOR.name, duration_pb2.DESCRIPTOR.name],
    )
    status = rpc.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    status.field.add(name="message", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    status.field.add(
        name="details",
        number=3,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".google.protobuf.Any",
    )
    retry = rpc.message_type.add(name="RetryInfo")
    retry.field.add(
        name="retry_delay",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_OPTIONAL,
        type_name=".google.protobuf.Duration",
    )
    return rpc


_POOL = descriptor_pool.DescriptorPool()
for _file in (any_pb2.DESCRIPTOR, duration_pb2.DESCRIPTOR):
    _POOL.Add(descriptor_pb2.FileDescriptorProto.FromString(_file.serialized_pb))
_POOL.Add(_rpc_file())
RpcStatus: type[Message] = GetMessageClass(_POOL.FindMessageTypeByName("google.rpc.Status"))
RetryInfo: type[Message] = GetMessageClass(_POOL.FindMessageTypeByName("google.rpc.RetryInfo"))


def rpc_status(code: int, message: str, retry_delay_s: float | None = None) -> bytes:
    """An encoded google.rpc.Status, with a RetryInfo when a delay is given: what a receiver
    sends in `grpc-status-details-bin` to ask for a retry later."""
    status = RpcStatus(code=code, message=message)
    if retry_delay_s is not None:
        info = RetryInfo()
        info.retry_delay.FromNanoseconds(int(retry_delay_s * NS_PER_S))  # type: ignore[attr-defined]
        status.details.add().Pack(info)  # type: ignore[attr-defined]
    return status.SerializeToString()


def retry_info_delay_s(details: bytes | None) -> float | None:
    """The RetryInfo delay in a google.rpc.Status's details, seconds; None when there is
    none (or the bytes are not a Status)."""
    if not details:
        return None
    try:
        status = RpcStatus.FromString(details)
    except DecodeError:
        return None
    for detail in status.details:  # type: ignore[attr-defined]
        if detail.type_url == RETRY_INFO_TYPE_URL:
            info = RetryInfo()
            if detail.Unpack(info):
                seconds: float = info.retry_delay.ToNanoseconds() / NS_PER_S  # type: ignore[attr-defined]
                return max(seconds, 0.0)
    return None


def status_message(details: bytes | None) -> str:
    """The message of an encoded google.rpc.Status (an OTLP/HTTP error body), or ""."""
    if not details:
        return ""
    try:
        return str(RpcStatus.FromString(details).message)  # type: ignore[attr-defined]
    except DecodeError:
        return ""
