"""HTTP/2 frames walked and masked in place, the stream still valid (redaction_h2.py), and the
DATA of streams whose headers name a content-encoding filled whole unless content is kept;
the header blocks' own rules are in test_redaction_hpack.py.

Every redacted stream here is read back with python-hyper's `hyperframe` and `hpack` (not the
redactor's own reader): what a test asserts is what a decoder downstream would see."""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Callable

import pytest
from hpack import Encoder
from hyperframe.frame import (
    DataFrame,
    HeadersFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.h2_wire import (
    ANSWER,
    GOOGLE_KEY,
    KEY,
    PREFACE,
    PROMPT,
    block,
    bodies_of,
    chat_body,
    client_wire,
    data_frames,
    headers_frames,
    headers_of,
    read_wire,
    request_headers,
    server_wire,
    sse_chunks,
    starred,
)
from tests.unit.test_redaction_hpack import coding_field, string
from zerotrace_collector.redaction import (
    CREDENTIAL_HEADERS,
    RedactionCounts,
    Redactor,
    StreamRedactor,
)
from zerotrace_collector.redaction_h2 import MAX_STREAMS, looks_h2
from zerotrace_collector.redaction_hpack import FILL

pytestmark = pytest.mark.unit

CREDENTIALS = {n.decode() for n in CREDENTIAL_HEADERS}
WIRES = {
    (side, huffman, pad): (client_wire if side == "client" else server_wire)(3, huffman, pad)
    for side in ("client", "server")
    for huffman in (True, False)
    for pad in (0, 3)
}


@pytest.mark.parametrize("huffman", [True, False], ids=["huffman", "raw"])
@pytest.mark.parametrize("pad", [0, 3], ids=["unpadded", "padded"])
def test_a_clients_credentials_and_prompts_are_masked_and_it_still_decodes(
    huffman: bool, pad: int
) -> None:
    wire = WIRES["client", huffman, pad]
    out = StreamRedactor().redact(wire)
    assert len(out) == len(wire)
    for secret in (KEY, GOOGLE_KEY, "0123456789abcdef", "c00k1e", "Q3 revenue"):
        assert secret.encode() not in out
    before, after = read_wire(wire), read_wire(out)  # framing and HPACK intact
    assert [s for s, _ in before] == [s for s, _ in after]
    for i, (sent, seen) in enumerate(zip(headers_of(before), headers_of(after), strict=True)):
        assert [n for n, _ in sent] == [n for n, _ in seen]
        for (name, value), (_, masked) in zip(sent, seen, strict=True):
            if name in CREDENTIALS:
                assert starred(masked)
                assert len(masked) == len(value) if not huffman else len(masked) <= len(value)
            elif name == ":path":
                assert masked.startswith("/v1beta/models/m:generate?key=*")
                assert GOOGLE_KEY not in masked
            else:
                assert masked == value, name
        assert ("x-request-id", f"req-{i}") in seen
    for stream, body in bodies_of(after).items():
        request = json.loads(body)
        assert request["model"] == "llama-3.1-8b-instruct" and request["stream"] is True
        assert starred(request["messages"][0]["content"]), stream


def test_a_servers_set_cookie_and_streamed_answer_are_masked() -> None:
    wire = WIRES["server", True, 3]
    out = StreamRedactor().redact(wire)
    fields = read_wire(out)
    for seen in headers_of(fields):
        assert dict(seen)[":status"] == "200" and dict(seen)["server"] == "vllm"
        assert starred(dict(seen)["set-cookie"])
    for body in bodies_of(fields).values():
        assert ANSWER.encode() not in body
        assert b'"usage": {"prompt_tokens": 12, "completion_tokens": 2}' in body
        assert b"data: [DONE]" in body


def test_keep_content_masks_credentials_only() -> None:
    out = StreamRedactor(keep_content=True).redact(WIRES["client", True, 0])
    assert KEY.encode() not in out
    bodies = bodies_of(read_wire(out))
    assert all(json.dumps(PROMPT)[1:-1].encode() in body for body in bodies.values())


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(WIRES)),
    st.booleans(),
    st.lists(st.integers(min_value=1, max_value=2_000), max_size=8),
)
def test_any_split_into_calls_masks_what_one_call_does(
    which: tuple[str, bool, int], keep: bool, cuts: list[int]
) -> None:
    wire = WIRES[which]
    whole = StreamRedactor(keep).redact(wire)
    splitter = StreamRedactor(keep)
    edges = [0, *sorted({c for c in cuts if c < len(wire)}), len(wire)]
    pieces = [splitter.redact(wire[a:b]) for a, b in itertools.pairwise(edges)]
    assert b"".join(pieces) == whole


def test_a_gap_loses_the_framing_until_a_call_starts_with_frames() -> None:
    redactor = Redactor()
    encoder = Encoder()
    body = json.dumps({"messages": [{"content": "gap secret"}]}).encode()
    frame = data_frames(1, [body], pad=0)
    first = PREFACE + headers_frames(1, block(encoder, request_headers(), True), None, 0, False)
    cut = redactor.redact("c", "out", first + frame[:20], complete=False)  # the rest lost
    text = redactor.redact("c", "out", b'xx", "content": "more secret"}')  # not frames: text
    assert text == b'xx", "content": "***********"}'
    after = headers_frames(3, block(encoder, request_headers(1), True), None, 0, True)
    _, seen = headers_of(read_wire(cut[: len(first)] + redactor.redact("c", "out", after)))
    fields = dict(seen)
    # The table was emptied: a name the encoder took from it is unknown, its value masked
    # whole; a whole field taken from it has no bytes to mask.
    assert starred(fields["x-request-id"]) and fields["content-type"] == "application/json"
    assert starred(fields["authorization"]) and fields[":method"] == "POST"
    assert redactor.counters()["h2_resync"] == 1


def test_an_upgrade_to_h2c_switches_after_the_101() -> None:
    head = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
    wire = WIRES["server", True, 0]
    stream = StreamRedactor()
    assert stream.redact(b"GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n").startswith(b"GET")
    out = stream.redact(head + wire)
    assert out.startswith(head)
    assert all(starred(dict(h)["set-cookie"]) for h in headers_of(read_wire(out[len(head) :])))


def test_what_is_not_http2_is_not_taken_for_it() -> None:
    assert looks_h2(PREFACE) and looks_h2(PREFACE[:10]) and looks_h2(WIRES["server", True, 0])
    for data in (
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
        b'{"model": "x"}',
        b"\x00\x00\x05\x01\x04\x00\x00\x00\x00hello",  # HEADERS on stream 0
        b"\x00\x00\x04",
    ):
        assert not looks_h2(data)
        assert StreamRedactor().redact(data) == data


def test_past_max_streams_bodies_start_afresh_and_it_is_counted() -> None:
    redactor = Redactor()
    wire = PREFACE + b"".join(
        DataFrame(2 * k + 1, b'{"content": "a').serialize() for k in range(MAX_STREAMS + 1)
    )
    out = redactor.redact("c", "out", wire)
    assert out.count(b'"content": "*') == MAX_STREAMS + 1
    assert redactor.counters()["h2_resync"] == 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.booleans(), st.integers(min_value=0, max_value=400))
def test_hostile_frames_never_raise_and_keep_their_length(
    data: bytes, complete: bool, cut: int
) -> None:
    stream = StreamRedactor()
    stream.redact(PREFACE)
    for piece in (data[:cut], data[cut:]):
        assert len(stream.redact(piece, complete)) == len(piece)


def test_a_header_block_of_nothing_but_frames_headers_is_read() -> None:
    frame = HeadersFrame(1, b"\x82\x86", flags={"END_HEADERS"}).serialize()  # GET, http
    assert StreamRedactor().redact(PREFACE + frame) == PREFACE + frame


# -- compressed bodies: filled whole unless content is kept ---------------------------------

STATUS_200 = b"\x88"
CODING_FORMS = ["static", "static-indexed", "never-indexed", "name", "name-indexed", "dynamic"]


def answer_block(form: str, huffman: bool, second: bool, coding: bytes | None = b"gzip") -> bytes:
    """A response's header block naming *coding* (None: no content-encoding) in *form*;
    "dynamic": the first block inserts it (entry 62), the *second* refers to it by index."""
    head = STATUS_200 + b"\x0f\x10" + string(b"text/event-stream", huffman)  # not indexed
    if coding is None:
        return head
    if form == "dynamic":
        return head + (b"\xbe" if second else coding_field("static-indexed", coding, huffman))
    return head + coding_field(form, coding, huffman)


def plain_block(huffman: bool) -> bytes:
    return STATUS_200 + b"\x0f\x10" + string(b"text/event-stream", huffman)


def gzipped(i: int) -> bytes:
    return gzip.compress(b"".join(sse_chunks(i)), mtime=0)


def coded_server_wire(
    form: str,
    huffman: bool,
    pad: int,
    coding: bytes | None = b"gzip",
    cut: int | None = None,
    body: Callable[[int], bytes] = gzipped,
) -> bytes:
    """SETTINGS, then streams 1 and 3 answered with *body* under *coding* (named in *form*;
    stream 1's block cut into a CONTINUATION at *cut*), stream 5 plain, interleaved."""
    one, three = body(1), body(3)
    out = SettingsFrame(0, settings={3: 100}).serialize()
    out += headers_frames(1, answer_block(form, huffman, False, coding), cut, pad, False)
    out += headers_frames(5, plain_block(huffman), None, pad, False)
    out += data_frames(1, [one[:40]], pad, end=False)
    out += data_frames(5, sse_chunks(5)[:1], pad, end=False)
    out += data_frames(1, [one[40:]], pad)
    out += headers_frames(3, answer_block(form, huffman, True, coding), None, pad, False)
    out += data_frames(3, [three[:7], three[7:]], pad)
    return out + data_frames(5, sse_chunks(5)[1:], pad)


def frames_of(wire: bytes) -> list[tuple[bytes, bytes]]:
    """(9-byte header, payload) of each frame, split by their lengths alone."""
    out, at = [], 0
    while at < len(wire):
        end = at + 9 + int.from_bytes(wire[at : at + 3], "big")
        out.append((wire[at : at + 9], wire[at + 9 : end]))
        at = end
    return out


def assert_filled_and_framed(wire: bytes, out: bytes, streams: set[int]) -> None:
    """*streams*' DATA payloads all FILL, padding and every frame header as sent; every other
    frame as the redactor masks it today."""
    assert len(out) == len(wire)
    for (head, sent), (head_out, seen) in zip(frames_of(wire), frames_of(out), strict=True):
        assert head_out == head
        stream = int.from_bytes(head[5:], "big")
        if head[3] == 0 and stream in streams:
            pad = sent[0] + 1 if head[4] & 0x08 else 0
            content = seen[pad and 1 : len(seen) - (pad and pad - 1)]
            assert seen[: pad and 1] == sent[: pad and 1] and set(content) == {FILL}
            assert seen[len(seen) - (pad and pad - 1) :] == sent[len(sent) - (pad and pad - 1) :]


@pytest.mark.parametrize("form", CODING_FORMS)
@pytest.mark.parametrize("huffman", [True, False], ids=["huffman", "raw"])
@pytest.mark.parametrize("pad", [0, 3], ids=["unpadded", "padded"])
def test_a_compressed_answer_is_filled_whole_and_still_decodes(
    form: str, huffman: bool, pad: int
) -> None:
    wire = coded_server_wire(form, huffman, pad)
    counts = RedactionCounts()
    out = StreamRedactor(counts=counts).redact(wire)
    assert_filled_and_framed(wire, out, {1, 3})
    after = read_wire(out)  # frames and HPACK as a decoder downstream reads them
    assert headers_of(after) == headers_of(read_wire(wire))
    assert all(dict(h).get("content-encoding", "gzip") == "gzip" for h in headers_of(after))
    bodies = bodies_of(after)
    assert bodies[1] == b"*" * len(gzipped(1)) and bodies[3] == b"*" * len(gzipped(3))
    # Stream 5, on the same connection, masked as it would be alone.
    alone = SettingsFrame(0, settings={3: 100}).serialize()
    alone += headers_frames(5, plain_block(huffman), None, pad, False)
    alone += data_frames(5, sse_chunks(5)[:1], pad, end=False)
    alone += data_frames(5, sse_chunks(5)[1:], pad)
    assert bodies[5] == bodies_of(read_wire(StreamRedactor().redact(alone)))[5]
    assert ANSWER.encode() not in bodies[5] and b'"completion_tokens": 2' in bodies[5]
    assert counts.content == 2 + 1  # once per compressed stream; stream 5's one string


@pytest.mark.parametrize("form", CODING_FORMS)
def test_with_keep_content_a_compressed_answer_leaves_as_captured(form: str) -> None:
    wire = coded_server_wire(form, True, 3)
    counts = RedactionCounts()
    assert StreamRedactor(keep_content=True, counts=counts).redact(wire) == wire
    assert counts.content == 0


def sse(i: int) -> bytes:
    return b"".join(sse_chunks(i))


@pytest.mark.parametrize("coding", [b"identity", b" Identity ", b""])
@pytest.mark.parametrize("form", ["static", "name", "dynamic"])
@pytest.mark.parametrize("huffman", [True, False], ids=["huffman", "raw"])
def test_identity_or_no_coding_keeps_todays_masking(
    coding: bytes, form: str, huffman: bool
) -> None:
    def bodies(wire: bytes) -> dict[int, bytes]:
        return bodies_of(read_wire(StreamRedactor().redact(wire)))

    named = bodies(coded_server_wire(form, huffman, 0, coding, body=sse))
    assert named == bodies(coded_server_wire(form, huffman, 0, None, body=sse))
    for stream in (1, 3, 5):
        assert ANSWER.encode() not in named[stream] and b"data: [DONE]" in named[stream]


def test_a_block_cut_into_a_continuation_anywhere_is_read_the_same() -> None:
    for huffman in (True, False):
        size = len(answer_block("name", huffman, False))
        whole = StreamRedactor().redact(coded_server_wire("name", huffman, 0))
        for cut in range(size + 1):
            wire = coded_server_wire("name", huffman, 0, cut=cut)
            out = StreamRedactor().redact(wire)
            assert_filled_and_framed(wire, out, {1, 3})
            assert bodies_of(read_wire(out)) == bodies_of(read_wire(whole))


@pytest.mark.parametrize("form", ["static", "name", "dynamic"])
@pytest.mark.parametrize("huffman", [True, False], ids=["huffman", "raw"])
def test_a_split_at_every_offset_fills_what_one_call_does(form: str, huffman: bool) -> None:
    wire = coded_server_wire(form, huffman, 3)
    whole = StreamRedactor().redact(wire)
    for cut in range(1, len(wire)):
        split = StreamRedactor()
        assert split.redact(wire[:cut]) + split.redact(wire[cut:]) == whole, cut


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(CODING_FORMS),
    st.booleans(),
    st.lists(st.integers(min_value=1, max_value=1_000), max_size=8),
)
def test_any_split_of_a_compressed_answer_fills_what_one_call_does(
    form: str, huffman: bool, cuts: list[int]
) -> None:
    wire = coded_server_wire(form, huffman, 0)
    whole = StreamRedactor().redact(wire)
    splitter = StreamRedactor()
    edges = [0, *sorted({c for c in cuts if c < len(wire)}), len(wire)]
    assert b"".join(splitter.redact(wire[a:b]) for a, b in itertools.pairwise(edges)) == whole


def test_a_compressed_request_body_is_filled_too() -> None:
    encoder = Encoder()
    body = gzip.compress(chat_body(), mtime=0)
    headers = [*request_headers(), ("content-encoding", "gzip")]
    wire = PREFACE + headers_frames(1, block(encoder, headers, True), None, 0, False)
    wire += data_frames(1, [body[:30], body[30:]], 0)
    counts = RedactionCounts()
    out = StreamRedactor(counts=counts).redact(wire)
    assert bodies_of(read_wire(out))[1] == b"*" * len(body)
    assert KEY.encode() not in out and counts.content == 1


def test_the_fill_ends_with_the_stream() -> None:
    """END_STREAM or RST_STREAM ends it: a later DATA on that id (a peer's slip) is scanned
    as text; a block that ends its stream fills nothing and is not counted."""
    late = b'{"content": "late"}'
    wire = coded_server_wire("static", False, 0)
    wire += data_frames(1, [late], 0)
    wire += headers_frames(7, answer_block("static", False, False), None, 0, False)
    wire += data_frames(7, [b"\x1f\x8b\x08"], 0, end=False)
    wire += RstStreamFrame(7, error_code=8).serialize()
    wire += data_frames(7, [late], 0)
    wire += headers_frames(9, answer_block("static", False, False), None, 0, True)
    wire += data_frames(9, [late], 0)
    counts = RedactionCounts()
    fields = read_wire(StreamRedactor(counts=counts).redact(wire))
    data = [f for s, f in fields if isinstance(f, bytes) and s in (1, 7, 9)]
    masked = b'{"content": "****"}'
    assert data[-4:] == [masked, b"***", masked, masked]
    assert counts.content == 3 + 1 + 3  # streams 1, 3, 7; stream 5's string; the late ones


def test_a_push_promise_naming_a_coding_fills_nothing() -> None:
    promise = PushPromiseFrame(1, promised_stream_id=2, flags={"END_HEADERS"})
    promise.data = b"\x82\x87\x84" + coding_field("static", b"gzip", False)  # GET https /
    wire = SettingsFrame(0).serialize() + headers_frames(1, plain_block(False), None, 0, False)
    wire += promise.serialize() + data_frames(1, [b'{"content": "x"}'], 0)
    out = StreamRedactor().redact(wire)
    assert bodies_of(read_wire(out))[1] == b'{"content": "*"}'


def test_bytes_lost_while_a_compressed_stream_is_open_are_filled_whole() -> None:
    """A call captured in part: what follows (not frames) may be the compressed body."""
    for coding, filled in ((b"gzip", True), (b"identity", False)):
        body = b'data: {"content": "' + b"x" * 60 + b'"}\n\n'
        head = SettingsFrame(0).serialize()
        head += headers_frames(1, answer_block("static", False, False, coding), None, 0, False)
        frame = data_frames(1, [body], 0)
        redactor = Redactor()
        first = redactor.redact("c", "in", head + frame[:40], complete=False)
        rest = redactor.redact("c", "in", frame[40:])  # the rest of the frame: no frames
        assert len(first) == len(head) + 40
        if filled:
            assert set(first[len(head) + 9 :]) == {FILL} and set(rest) == {FILL}
        else:  # today's rule: scanned as text (nothing in it that the scanner can tell)
            assert rest == frame[40:]
        if filled:  # frames again: the stream's DATA is still filled
            after = redactor.redact("c", "in", data_frames(1, [b"\x1f" * 4], 0))
            assert after[9:] == b"****"


def test_past_max_streams_compressed_ones_forget_the_oldest_and_count_it() -> None:
    encoder = Encoder()
    wire = SettingsFrame(0).serialize()
    for k in range(MAX_STREAMS + 1):
        headers = [(":status", "200"), ("content-encoding", "gzip")]
        wire += headers_frames(2 * k + 1, block(encoder, headers, True), None, 0, False)
    wire += data_frames(1, [b'{"content": "a"}'], 0) + data_frames(3, [b"\x1f\x8b"], 0)
    redactor = Redactor()
    fields = read_wire(redactor.redact("c", "in", wire))
    assert bodies_of(fields) == {1: b'{"content": "*"}', 3: b"**"}
    assert redactor.counters()["h2_resync"] == 1
