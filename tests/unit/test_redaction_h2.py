"""HTTP/2 frames walked and masked in place, the stream still valid (redaction_h2.py); the
header blocks' own rules are in test_redaction_hpack.py.

Every redacted stream here is read back with python-hyper's `hyperframe` and `hpack` (not the
redactor's own reader): what a test asserts is what a decoder downstream would see."""

from __future__ import annotations

import itertools
import json

import pytest
from hpack import Encoder
from hyperframe.frame import DataFrame, HeadersFrame
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
    client_wire,
    data_frames,
    headers_frames,
    headers_of,
    read_wire,
    request_headers,
    server_wire,
    starred,
)
from zerotrace_collector.redaction import CREDENTIAL_HEADERS, Redactor, StreamRedactor
from zerotrace_collector.redaction_h2 import MAX_STREAMS, looks_h2

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
