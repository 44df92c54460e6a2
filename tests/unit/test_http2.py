"""HTTP/2 and gRPC spans (http2.py) from client and server bytes written with python-hyper's
`hpack` encoder and `hyperframe` frames, as h2, grpcio and nghttp2 write them: gRPC unary,
streaming each way, bidi, trailers-only errors, plain GET and POST, interleaved streams,
resets; any cut of the bytes into calls gives the same spans; hostile bytes never raise and
stay bounded; a connection joined after its first requests still names the later ones."""

from __future__ import annotations

import pytest
from hpack import Encoder
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit import h2_wire
from tests.unit.http_wire import close, sock
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace_correlator import http2_frames, http2_hpack
from zerotrace_correlator.http2 import (
    MAX_OPEN_STREAMS,
    OVERFLOW_STREAMS,
    PREFACE,
    UNKNOWN_STREAM_FRAMES,
    Http2Parser,
    recognise,
    sent_by_server,
)
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtoSpan, Side

pytestmark = pytest.mark.unit

GRPC = "application/grpc"
Headers = list[tuple[str, str]]


def grpc_request(method: str = "/helloworld.Greeter/SayHello") -> Headers:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", method),
        (":authority", "model-server:50051"),
        ("content-type", GRPC),
        ("te", "trailers"),
        ("grpc-timeout", "5S"),
        ("user-agent", "grpc-python/1.66"),
    ]


def messages(*sizes: int) -> bytes:
    return b"".join(b"\x00" + n.to_bytes(4, "big") + b"m" * n for n in sizes)


class Wire:
    """Both sides of one connection, each with its own HPACK encoder, as (side, bytes)."""

    def __init__(self, preface: bool = True) -> None:
        self.client, self.server = Encoder(), Encoder()
        self.calls: list[tuple[Side, bytes]] = []
        if preface:
            self.send(REQUEST, PREFACE + SettingsFrame(0, settings={1: 4096}).serialize())
            self.send(RESPONSE, SettingsFrame(0, settings={3: 100, 5: 32768}).serialize())
            self.send(REQUEST, SettingsFrame(0, flags={"ACK"}).serialize())

    def send(self, side: Side, data: bytes) -> None:
        self.calls.append((side, data))

    def headers(
        self, side: Side, stream: int, headers: Headers, end: bool = False, cut: int = 0
    ) -> None:
        block = (self.client if side == REQUEST else self.server).encode(headers)
        head = block[:cut] if cut else block
        flags = set() if cut else {"END_HEADERS"}
        if end:
            flags.add("END_STREAM")
        out = HeadersFrame(stream, head, flags=flags).serialize()
        if cut:
            out += ContinuationFrame(stream, block[cut:], flags={"END_HEADERS"}).serialize()
        self.send(side, out)

    def data(self, side: Side, stream: int, data: bytes, end: bool = False, pad: int = 0) -> None:
        frame = DataFrame(stream, data, flags={"END_STREAM"} if end else set())
        if pad:
            frame.flags.add("PADDED")
            frame.pad_length = pad
        self.send(side, frame.serialize())

    def grpc_call(
        self, stream: int, requests: tuple[int, ...], responses: tuple[int, ...], status: int = 0
    ) -> None:
        self.headers(REQUEST, stream, grpc_request())
        self.data(REQUEST, stream, messages(*requests), end=True)
        self.headers(RESPONSE, stream, [(":status", "200"), ("content-type", GRPC)])
        self.data(RESPONSE, stream, messages(*responses))
        self.headers(RESPONSE, stream, [("grpc-status", str(status))], end=True)

    def bytes_of(self, side: Side) -> bytes:
        return b"".join(data for s, data in self.calls if s == side)


def run(
    calls: list[tuple[Side, bytes]], parser: Http2Parser | None = None, close: bool = True
) -> list[ProtoSpan]:
    parser = parser or Http2Parser()
    out: list[ProtoSpan] = []
    for t, (side, data) in enumerate(calls, 1):
        out += parser.feed(side, data, t * 10, t * 10 + 5)
    assert not parser.error, parser.error
    return out + (parser.close(10_000) if close else [])


def test_a_unary_grpc_call_is_one_span_named_by_its_method_with_trailers_and_counts() -> None:
    wire = Wire()
    wire.grpc_call(1, (12,), (30,))
    [span] = run(wire.calls)
    assert (span.protocol, span.name, span.status) == ("grpc", "helloworld.Greeter/SayHello", "ok")
    assert span.attributes == {
        names.ATTR_SERVER_ADDRESS: "model-server",
        names.ATTR_SERVER_PORT: 50051,
        names.ATTR_RPC_SYSTEM: "grpc",
        names.ATTR_RPC_SERVICE: "helloworld.Greeter",
        names.ATTR_RPC_METHOD: "SayHello",
        names.ATTR_RPC_REQUEST_MESSAGES: 1,
        names.ATTR_RPC_RESPONSE_MESSAGES: 1,
        names.ATTR_RPC_GRPC_STATUS_CODE: 0,
        names.ATTR_HTTP_STATUS: 200,
        names.ATTR_NETWORK_PROTOCOL_VERSION: "2",
    }
    # From the request HEADERS' call (the 4th) to the trailers' call (the 8th).
    assert (span.start_ns, span.end_ns) == (40, 85)
    assert span.request_bytes == sum(len(d) for d in [*(d for _, d in wire.calls[3:5])])
    assert span.response_bytes == sum(len(d) for _, d in wire.calls[5:8])


def test_streaming_each_way_counts_messages_across_and_within_data_frames() -> None:
    wire = Wire()
    # Server streaming: one request, four answers; one cut across two DATA frames (padded).
    wire.headers(REQUEST, 1, grpc_request("/pkg.Model/Generate"))
    wire.data(REQUEST, 1, messages(5), end=True)
    wire.headers(RESPONSE, 1, [(":status", "200"), ("content-type", "application/grpc+proto")])
    body = messages(3, 0, 100, 7)
    wire.data(RESPONSE, 1, body[:60], pad=9)
    wire.data(RESPONSE, 1, body[60:])
    # Client streaming on stream 3, interleaved with bidi on stream 5.
    wire.headers(REQUEST, 3, grpc_request("/pkg.Model/Upload"))
    wire.headers(REQUEST, 5, grpc_request("/pkg.Model/Chat"))
    for k in range(3):
        wire.data(REQUEST, 3, messages(10 + k))
        wire.data(REQUEST, 5, messages(1))
        if k == 0:
            wire.headers(RESPONSE, 5, [(":status", "200"), ("content-type", GRPC)])
        wire.data(RESPONSE, 5, messages(2, 2))
    wire.data(REQUEST, 3, b"", end=True)
    wire.data(REQUEST, 5, b"", end=True)
    wire.headers(RESPONSE, 1, [("grpc-status", "0")], end=True)
    wire.headers(RESPONSE, 3, [(":status", "200"), ("content-type", GRPC)])
    wire.data(RESPONSE, 3, messages(4))
    wire.headers(RESPONSE, 5, [("grpc-status", "0"), ("grpc-message", "")], end=True)
    wire.headers(RESPONSE, 3, [("grpc-status", "0")], end=True)
    found = {s.name: s for s in run(wire.calls)}
    counts = {
        name: (
            s.attributes[names.ATTR_RPC_REQUEST_MESSAGES],
            s.attributes[names.ATTR_RPC_RESPONSE_MESSAGES],
            s.status,
        )
        for name, s in found.items()
    }
    assert counts == {
        "pkg.Model/Generate": (1, 4, "ok"),
        "pkg.Model/Upload": (3, 1, "ok"),
        "pkg.Model/Chat": (3, 6, "ok"),
    }


def test_a_trailers_only_answer_is_an_error_named_by_its_status_code() -> None:
    wire = Wire()
    wire.headers(REQUEST, 1, grpc_request())
    wire.data(REQUEST, 1, messages(4), end=True)
    wire.headers(
        RESPONSE,
        1,
        [(":status", "200"), ("content-type", GRPC), ("grpc-status", "14"), ("grpc-message", "x")],
        end=True,
    )
    [span] = run(wire.calls)
    assert (span.status, span.error_type) == ("error", "UNAVAILABLE")
    assert span.attributes[names.ATTR_RPC_GRPC_STATUS_CODE] == 14
    assert span.attributes[names.ATTR_RPC_RESPONSE_MESSAGES] == 0


def test_a_grpc_answer_ending_without_a_status_is_an_error() -> None:
    wire = Wire()
    wire.headers(REQUEST, 1, grpc_request(), end=True)
    wire.headers(RESPONSE, 1, [(":status", "503"), ("content-type", GRPC)], end=True)
    [span] = run(wire.calls)
    assert (span.protocol, span.status, span.error_type) == ("grpc", "error", "503")


def plain_requests(wire: Wire) -> None:
    get = [(":method", "GET"), (":scheme", "http"), (":path", "/index.html"),
           (":authority", "[::1]:8080")]  # fmt: skip
    post = [(":method", "POST"), (":scheme", "https"), (":path", "/v1/embed?key=secret"),
            (":authority", "api.internal"), ("content-type", "application/json")]  # fmt: skip
    wire.headers(REQUEST, 1, get, end=True)
    wire.headers(REQUEST, 3, post, cut=7)  # a CONTINUATION
    wire.data(REQUEST, 3, b'{"input": "x"}', end=True, pad=3)
    wire.headers(RESPONSE, 3, [(":status", "503"), ("retry-after", "1")], end=True)
    wire.headers(RESPONSE, 1, [(":status", "404"), ("content-type", "text/html")])
    wire.data(RESPONSE, 1, b"not here", end=True)


def test_plain_http2_requests_are_named_method_and_path_and_fail_on_5xx() -> None:
    wire = Wire()
    plain_requests(wire)
    post, get = run(wire.calls)
    assert (post.protocol, post.name, post.status, post.error_type) == (
        "http2", "POST /v1/embed", "error", "503",
    )  # fmt: skip
    assert post.attributes[names.ATTR_URL_PATH] == "/v1/embed"  # the query string is not kept
    assert post.attributes[names.ATTR_SERVER_ADDRESS] == "api.internal"
    assert names.ATTR_SERVER_PORT not in post.attributes
    assert (get.name, get.status) == ("GET /index.html", "ok")  # 404: not a server error
    assert get.attributes == {
        names.ATTR_SERVER_ADDRESS: "::1",
        names.ATTR_SERVER_PORT: 8080,
        names.ATTR_HTTP_METHOD: "GET",
        names.ATTR_URL_PATH: "/index.html",
        names.ATTR_HTTP_STATUS: 404,
        names.ATTR_NETWORK_PROTOCOL_VERSION: "2",
    }
    client = Http2Parser(client_view=True)
    _, get = run(wire.calls, client)
    assert (get.status, get.error_type) == ("error", "404")


def test_resets_goaway_and_close_end_the_streams_they_cut() -> None:
    wire = Wire()
    for stream in (1, 3, 5, 7):
        wire.headers(REQUEST, stream, grpc_request(), end=True)
    wire.send(REQUEST, RstStreamFrame(1, error_code=8).serialize())
    wire.send(RESPONSE, GoAwayFrame(0, last_stream_id=3, error_code=0).serialize())
    wire.headers(RESPONSE, 3, [(":status", "200"), ("content-type", GRPC)])
    found = run(wire.calls)
    assert [(s.status, s.error_type) for s in found] == [
        ("error", "CANCEL"),
        ("error", "GOAWAY"),
        ("error", "GOAWAY"),
        ("incomplete", ""),  # stream 3: still answering at the close
    ]


def test_a_pushed_stream_is_a_span_too() -> None:
    wire = Wire()
    wire.headers(REQUEST, 1, [(":method", "GET"), (":path", "/"), (":authority", "a")], end=True)
    block = wire.server.encode([(":method", "GET"), (":path", "/style.css"), (":authority", "a")])
    frame = PushPromiseFrame(1, promised_stream_id=2, data=block, flags={"END_HEADERS"})
    wire.send(RESPONSE, frame.serialize())
    wire.headers(RESPONSE, 1, [(":status", "200")], end=True)
    wire.headers(RESPONSE, 2, [(":status", "200")], end=True)
    assert [s.name for s in run(wire.calls)] == ["GET /", "GET /style.css"]


def everything() -> Wire:
    wire = Wire()
    wire.grpc_call(1, (12, 0), (30,), status=5)
    wire.grpc_call(3, (1,), (2, 3))
    wire.send(REQUEST, PingFrame(0, opaque_data=b"12345678").serialize())
    wire.send(RESPONSE, WindowUpdateFrame(0, window_increment=1000).serialize())
    wire.headers(REQUEST, 5, grpc_request("/a.B/C"), cut=5)
    wire.data(REQUEST, 5, messages(70000)[:40000])
    wire.data(REQUEST, 5, messages(70000)[40000:], end=True)
    wire.headers(RESPONSE, 5, [(":status", "200"), ("content-type", GRPC)])
    wire.headers(RESPONSE, 5, [("grpc-status", "0")], end=True)
    return wire


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_cut_into_calls_gives_the_same_spans(data: st.DataObject) -> None:
    wire = everything()
    want = [(s.name, s.status, s.attributes) for s in run(wire.calls)]
    client, server = wire.bytes_of(REQUEST), wire.bytes_of(RESPONSE)
    # Each side cut anywhere; the server's bytes after the client's (its answers follow).
    calls: list[tuple[Side, bytes]] = []
    for side, stream in ((REQUEST, client), (RESPONSE, server)):
        cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=12)))
        for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            calls.append((side, stream[a:b]))
    assert [(s.name, s.status, s.attributes) for s in run(calls)] == want
    assert len(want) == 3 and want[0][1] == "error"  # NOT_FOUND


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=300)), max_size=20), st.booleans())
def test_hostile_bytes_never_raise_and_stay_bounded(
    calls: list[tuple[bool, bytes]], preface: bool
) -> None:
    parser = Http2Parser()
    if preface:
        parser.feed(REQUEST, PREFACE, 0, 0)
    for t, (client, data) in enumerate(calls):
        for span in parser.feed(REQUEST if client else RESPONSE, data, t, t):
            assert span.end_ns >= span.start_ns
        assert parser.buffered_bytes() <= 2 * (http2_frames.MAX_HEADER_BLOCK_BYTES + 6 + 9)
        assert parser.open_streams() <= MAX_OPEN_STREAMS
        assert "\n" not in parser.error
    for span in parser.close(1000):
        assert span.status == "incomplete"


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream.to_bytes(4, "big")
        + (payload)
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (frame(0, 1, 0, b"x"), "frame type 0 on stream 0"),
        (frame(4, 0, 1, b""), "frame type 4 on stream 1"),
        (frame(4, 0, 0, b"12345"), "SETTINGS of 5 bytes"),
        (frame(3, 0, 1, b"12"), "frame type 3 of 2 bytes"),
        (frame(0, 8, 1, b"\x09abc"), "DATA padding longer than the frame"),
        (frame(1, 4, 1, b"\x80"), "HPACK: index 0"),
        (frame(1, 4, 1, b"\xff"), "HPACK: integer past the block"),
        (frame(1, 0, 1, b"\x82") + frame(0, 0, 1, b""), "a header block not continued"),
        (frame(9, 4, 1, b"\x82"), "CONTINUATION without HEADERS"),
        (frame(1, 0x0C, 1, b"\x05\x82"), "padding longer than the frame"),
        (b"PRI * HTTP/1.1\r\n", "not the HTTP/2 client preface"),
    ],
)
def test_protocol_errors_stop_the_parser_with_a_reason(data: bytes, reason: str) -> None:
    parser = Http2Parser()
    parser.feed(REQUEST, PREFACE[:5], 0, 0)  # a preface cut across calls reads on
    if not data.startswith(PREFACE[:5]):
        parser.feed(REQUEST, PREFACE[5:], 0, 0)
    else:
        data = data[5:]
    assert parser.feed(REQUEST, data, 1, 1) == []
    assert reason in parser.error
    assert parser.feed(REQUEST, frame(1, 5, 3, b"\x82\x84"), 2, 2) == []  # nothing more


def test_limits_are_counted_not_grown() -> None:
    parser = Http2Parser()
    parser.feed(REQUEST, PREFACE, 0, 0)
    encoder = Encoder()
    block = encoder.encode([(":method", "GET"), (":path", "/")])
    for k in range(MAX_OPEN_STREAMS + 3):
        parser.feed(REQUEST, frame(1, 5, 2 * k + 1, block), 1, 1)
    assert parser.open_streams() == MAX_OPEN_STREAMS
    assert parser.counters[OVERFLOW_STREAMS] == 3
    # A header block over MAX_HEADER_BLOCK_BYTES is skipped and the table resynchronised.
    big = encoder.encode([(":method", "GET"), (":path", "/" + "p" * 70_000)], huffman=False)
    parser.feed(REQUEST, frame(1, 4, 9999, big), 2, 2)
    assert parser.counters["h2_cut_header_blocks"] == 1
    assert parser.counters[http2_hpack.SYNC_LOST] == 1
    # A frame over the receiver's SETTINGS_MAX_FRAME_SIZE (16384 by default) is read anyway.
    parser.feed(REQUEST, frame(0, 0, 1, b"x" * 20_000), 3, 3)
    assert parser.counters[http2_frames.OVERSIZED_FRAMES] == 2  # and the 70 KB HEADERS
    assert not parser.error


def joined_wire() -> tuple[Wire, int, int]:
    """Three requests whose later ones refer to dynamic entries the first ones inserted, and
    where the first two requests' bytes end on each side."""
    wire = Wire()
    wire.grpc_call(1, (3,), (4,))
    wire.headers(REQUEST, 3, [(":method", "GET"), (":path", "/health"),
                              (":authority", "model-server:50051")], end=True)  # fmt: skip
    wire.headers(RESPONSE, 3, [(":status", "204")], end=True)
    client, server = len(wire.bytes_of(REQUEST)), len(wire.bytes_of(RESPONSE))
    wire.grpc_call(5, (8,), (9,), status=7)
    wire.headers(REQUEST, 7, [(":method", "GET"), (":path", "/metrics"),
                              (":authority", "model-server:50051")], end=True)  # fmt: skip
    wire.headers(RESPONSE, 7, [(":status", "200")], end=True)
    return wire, client, server


def test_a_connection_joined_after_its_first_requests_still_names_the_later_ones() -> None:
    wire, client_at, server_at = joined_wire()
    client, server = wire.bytes_of(REQUEST)[client_at:], wire.bytes_of(RESPONSE)[server_at:]
    assert recognise(client) and not sent_by_server(client) and sent_by_server(server)
    parser = Http2Parser()
    found = run([(REQUEST, client), (RESPONSE, server)], parser)
    assert parser.joined_late
    unary, metrics = found
    # :method POST, :status and grpc-status' name come from the static table or literals; the
    # path, authority and content-type repeat entries inserted before we looked.
    assert (unary.name, unary.status) == ("?unknown", "ok")
    assert unary.attributes[names.ATTR_HTTP_STATUS] == 200
    assert unary.attributes[names.ATTR_SERVER_ADDRESS] == "?unknown"
    # The trailers' "grpc-status: 7" names an entry we never saw: a trailer of unknown name
    # may be grpc-status, so the call is gRPC with an unknown code (not called an error).
    assert (unary.protocol, unary.status) == ("grpc", "ok")
    assert unary.attributes[names.ATTR_RPC_GRPC_STATUS_CODE] == "?unknown"
    assert unary.attributes[names.ATTR_RPC_SERVICE] == "?unknown"
    assert unary.attributes[names.ATTR_RPC_RESPONSE_MESSAGES] == 1
    assert (metrics.name, metrics.status) == ("GET /metrics", "ok")
    assert metrics.attributes[names.ATTR_HTTP_STATUS] == 200
    assert metrics.attributes[names.ATTR_SERVER_ADDRESS] == "?unknown"
    assert parser.counters[http2_hpack.UNKNOWN_REFERENCES] >= 3


def test_joined_mid_frame_the_first_calls_are_skipped_until_a_frame_starts() -> None:
    wire, client_at, server_at = joined_wire()
    client, server = wire.bytes_of(REQUEST)[client_at:], wire.bytes_of(RESPONSE)[server_at:]
    parser = Http2Parser()
    parser.feed(REQUEST, client, 1, 1)
    # The server's side joined inside a frame: that call is skipped, the next one read.
    parser.feed(RESPONSE, b"\x77" * 20, 2, 2)
    found = parser.feed(RESPONSE, server, 3, 3)
    assert [s.name for s in found] == ["?unknown", "GET /metrics"]
    assert parser.counters[http2_frames.SKIPPED_BYTES] == 20


def test_frames_of_streams_opened_before_we_looked_are_skipped() -> None:
    wire = Wire(preface=False)
    wire.data(RESPONSE, 9, messages(3), end=True)
    wire.headers(REQUEST, 11, [(":method", "GET"), (":path", "/x")], end=True)
    wire.headers(RESPONSE, 11, [(":status", "200")], end=True)
    parser = Http2Parser()
    assert [s.name for s in run(wire.calls, parser)] == ["GET /x"]
    assert parser.counters[UNKNOWN_STREAM_FRAMES] == 1


@pytest.mark.parametrize(
    "first",
    [
        PREFACE,
        PREFACE[:14],
        h2_wire.client_wire(1),
        h2_wire.server_wire(1),
        SettingsFrame(0, settings={3: 100}).serialize(),
        HeadersFrame(1, b"\x82\x84", flags={"END_HEADERS"}).serialize(),
    ],
)
def test_recognises_the_preface_and_plausible_frames(first: bytes) -> None:
    assert recognise(first)


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"PRI * HTTP/",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\n",
        b"HTTP/1.1 200 OK\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
        b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",  # Redis
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",  # PostgreSQL's SSLRequest
        b"\x00\x00\x00\x54\x00\x03\x00\x00user\x00app\x00",  # PostgreSQL's startup
        b"\x00\x00\x00\x1e\x00\x12\x00\x03\x00\x00\x00\x01\x00\x05rdkfk",  # Kafka ApiVersions
        b"\x00\x1d\xab\xcd\x01\x00\x00\x01\x00\x00",  # DNS over TCP
        frame(0, 1, 0, b""),  # DATA on stream 0
        frame(1, 0x40, 1, b"\x82"),  # an undefined flag
        frame(4, 0, 0, b"123456") + b"\xff" * 9,  # the second header is not one
    ],
)
def test_refuses_other_protocols(first: bytes) -> None:
    assert not recognise(first)


def test_an_h2c_grpc_call_through_the_correlator_is_one_client_span() -> None:
    """The HTTP/1 sniffer hands the preface over (http1.sniff: OTHER), the registry picks
    this parser, and the call comes out as a derived span of kind grpc.client."""
    wire = Wire()
    wire.grpc_call(1, (12,), (30, 5), status=0)
    correlator, out = HttpLlmCorrelator(), []
    client_writes = b"".join(d for s, d in wire.calls[:1]) + wire.calls[3][1]
    out += correlator.feed_socket(sock("EGRESS", client_writes, 1_000))
    out += correlator.feed_socket(sock("INGRESS", wire.calls[1][1], 1_500))
    out += correlator.feed_socket(sock("EGRESS", wire.calls[2][1] + wire.calls[4][1], 2_000))
    out += correlator.feed_socket(
        sock("INGRESS", wire.bytes_of(RESPONSE)[len(wire.calls[1][1]) :], 9_000)
    )
    out += correlator.feed_conn(close(10_000))
    found = [datum for record, datum in out if record == names.DERIVED_SPAN.record]
    [span] = found
    assert (span["kind"], span["name"], span["status"]) == (
        "grpc.client", "helloworld.Greeter/SayHello", "OK",
    )  # fmt: skip
    assert (span["start_ns"], span["end_ns"]) == (1_000, 9_005)
    attrs = span["attributes"]
    assert attrs[names.ATTR_RPC_RESPONSE_MESSAGES] == "2"
    assert attrs[names.ATTR_OBSERVATION_POINT] == "CLIENT"
    AvroCodec(load_schema_dir(), InMemorySchemaRegistry()).encode(names.DERIVED_SPAN.record, span)


def test_bytes_count_every_frame_of_the_stream_continuations_included() -> None:
    wire = Wire()
    wire.headers(REQUEST, 1, grpc_request(), cut=4)
    wire.data(REQUEST, 1, messages(9), end=True)
    wire.headers(RESPONSE, 1, [(":status", "200"), ("content-type", GRPC)], cut=2)
    wire.data(RESPONSE, 1, messages(3))
    wire.headers(RESPONSE, 1, [("grpc-status", "0"), ("grpc-message", "fine")], cut=3, end=True)
    [span] = run(wire.calls)
    assert span.request_bytes == sum(len(d) for _, d in wire.calls[3:5])
    assert span.response_bytes == sum(len(d) for _, d in wire.calls[5:8])


def test_through_the_correlator_a_client_fails_on_4xx_and_a_server_only_on_5xx() -> None:
    """The registry's client view (protocols.ProtocolEntry.make_client): OpenTelemetry's
    rule for a client's HTTP span, which a server's span of the same exchange does not take."""
    wire = Wire()
    plain_requests(wire)
    requests, responses = wire.bytes_of(REQUEST), wire.bytes_of(RESPONSE)
    found = {}
    for local_asks in (True, False):
        asks, answers = ("EGRESS", "INGRESS") if local_asks else ("INGRESS", "EGRESS")
        correlator = HttpLlmCorrelator()
        out = correlator.feed_socket(sock(asks, requests, 1_000))
        out += correlator.feed_socket(sock(answers, responses, 2_000))
        for record, datum in out:
            if record == names.DERIVED_SPAN.record:
                found[(datum["kind"], datum["name"])] = (datum["status"], datum["attributes"])
    assert {k: v[0] for k, v in found.items()} == {
        ("http2.client", "GET /index.html"): "ERROR",
        ("http2.client", "POST /v1/embed"): "ERROR",
        ("http2.server", "GET /index.html"): "OK",
        ("http2.server", "POST /v1/embed"): "ERROR",
    }
    assert found[("http2.client", "GET /index.html")][1][names.ATTR_ERROR_TYPE] == "404"


@pytest.mark.parametrize("source", ["SYSCALL", "PACKET"])
def test_a_server_preface_seen_first_still_leaves_the_client_asking(source: str) -> None:
    """grpcio's server writes its SETTINGS as soon as it accepts: a capture, or a server's
    own writes, may show them before the client's preface. They are the server's."""
    wire = Wire()
    wire.grpc_call(1, (12,), (30,), status=0)
    settings = wire.calls[1][1]
    assert sent_by_server(settings) and not sent_by_server(wire.calls[0][1])
    assert not sent_by_server(SettingsFrame(0, flags={"ACK"}).serialize())
    # The server's side seen from the server (SYSCALL) or on the wire (PACKET) first.
    correlator = HttpLlmCorrelator()
    out = correlator.feed_socket(sock("EGRESS", settings, 1_000, source=source))
    out += correlator.feed_socket(sock("INGRESS", wire.bytes_of(REQUEST), 2_000, source=source))
    rest = wire.bytes_of(RESPONSE)[len(settings) :]
    out += correlator.feed_socket(sock("EGRESS", rest, 3_000, source=source))
    out += correlator.feed_conn(close(10_000))
    [span] = [datum for record, datum in out if record == names.DERIVED_SPAN.record]
    assert (span["name"], span["status"]) == ("helloworld.Greeter/SayHello", "OK")
    side = "NETWORK" if source == "PACKET" else "SERVER"
    assert span["attributes"][names.ATTR_OBSERVATION_POINT] == side
    assert span["attributes"][names.ATTR_RPC_GRPC_STATUS_CODE] == "0"


def test_streams_of_one_start_ending_apart_get_their_own_span_ids() -> None:
    """Two requests in one write (one start), answered with another stream's answer between
    them: ranks count per start, so the ids differ (a store keeps all three)."""
    wire = Wire()
    get = [(":method", "GET"), (":scheme", "http"), (":authority", "a")]
    for sid in (1, 3, 5):
        wire.headers(REQUEST, sid, [*get, (":path", f"/s{sid}")], end=True)
    for sid in (1, 5, 3):
        wire.headers(RESPONSE, sid, [(":status", "200")], end=True)
    requests = wire.bytes_of(REQUEST)
    last = wire.calls[5][1]  # stream 5's HEADERS: a write of its own, later
    correlator = HttpLlmCorrelator()
    out = correlator.feed_socket(sock("EGRESS", requests[: -len(last)], 1_000))
    out += correlator.feed_socket(sock("EGRESS", last, 2_000))
    out += correlator.feed_socket(sock("INGRESS", wire.bytes_of(RESPONSE), 3_000))
    found = [datum for record, datum in out if record == names.DERIVED_SPAN.record]
    assert [(s["name"], s["start_ns"]) for s in found] == [
        ("GET /s1", 1_000), ("GET /s5", 2_000), ("GET /s3", 1_000),
    ]  # fmt: skip
    assert len({s["span_id"] for s in found}) == 3
