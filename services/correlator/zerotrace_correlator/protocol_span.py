"""What every protocol parser of the correlator gives, and how it is driven. Pure.

A parser reads one connection (TCP) or one flow (UDP): the bytes each side sent, in order,
each piece with the time of the socket call or packet that carried it. It pairs requests with
responses (in order, or by the id the protocol carries) and gives each pair as a `ProtoSpan`:
a request/response span with OpenTelemetry semantic-convention attributes.

The contract every parser keeps (tests/unit/test_<parser>.py check it, bench/fuzz runs it):
- `feed(side, data, start_ns, end_ns)` never raises on input. Bytes that cannot be this
  protocol put the parser in a terminal error state with a one-line reason (`error`); it
  gives nothing more.
- Bounded: whatever a peer sends, a parser buffers at most its documented limits (a frame, a
  message, a few pending requests); each limit hit is counted in `counters` and the parser
  skips or stops, never grows.
- `side` is REQUEST for the bytes of the side that asks (a client's writes seen at the client,
  its reads seen at the server: the caller maps directions), RESPONSE for the other.
- A span's start is the time of the request's first byte, its end the time of the response's
  last byte; a request with no answer yet is held (at most the pipelining limit) and given by
  `close(now_ns)` with `status="incomplete"`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

Side = Literal["REQUEST", "RESPONSE"]
REQUEST: Side = "REQUEST"
RESPONSE: Side = "RESPONSE"
Status = Literal["ok", "error", "incomplete"]
AttributeValue = str | int | float | bool


@dataclass(frozen=True)
class ProtoSpan:
    protocol: str  # "dns", "redis", "postgresql", "mysql", "kafka", "http2", "grpc"
    name: str  # the span name OpenTelemetry suggests: "GET", "SELECT users", "Produce orders"
    start_ns: int
    end_ns: int
    status: Status
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    error_type: str = ""  # error.type when status is "error": a code or an error name
    request_bytes: int = 0
    response_bytes: int = 0


class ProtocolParser(Protocol):
    protocol: str

    @property
    def error(self) -> str:
        """Why the parser stopped ("" while it reads on)."""
        ...

    @property
    def counters(self) -> Mapping[str, int]:
        """Limits hit and things skipped, by name (e.g. "oversized_frames")."""
        ...

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]: ...

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """End of the connection: every request still waiting, as incomplete spans."""
        ...
