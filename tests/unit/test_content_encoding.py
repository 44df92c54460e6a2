"""Compressed response bodies decoded for the LLM readers, bounded (content_encoding.py)."""

from __future__ import annotations

import gzip
import itertools
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.http_wire import chat_delta, sse, usage
from zerotrace_correlator.content_encoding import (
    MASKED,
    MAX_MEMBERS,
    PIECE_BYTES,
    BodyDecoder,
    DecodingAnalyzer,
    codings_of,
    decoding,
)
from zerotrace_correlator.openai_stream import ResponseAnalyzer

pytestmark = pytest.mark.unit

TEXT = json.dumps({"choices": [{"message": {"content": "Hello " * 50}}]}).encode()


def _all(decoder: BodyDecoder, *pieces: bytes) -> bytes:
    return b"".join(out for piece in pieces for out in decoder.decode(piece))


def _deflate(data: bytes, wbits: int) -> bytes:
    obj = zlib.compressobj(wbits=wbits)
    return obj.compress(data) + obj.flush()


@pytest.mark.parametrize(
    ("header", "codings"),
    [
        (None, []),
        ("", []),
        ("identity", []),
        ("GZIP", ["gzip"]),
        ("gzip, identity, deflate", ["gzip", "deflate"]),
        ("br", ["br"]),
    ],
)
def test_codings_of_a_header(header: str | None, codings: list[str]) -> None:
    assert codings_of(header) == codings


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        ("gzip", gzip.compress(TEXT)),
        ("x-gzip", gzip.compress(TEXT)),
        ("deflate", _deflate(TEXT, zlib.MAX_WBITS)),  # zlib-wrapped, as RFC 9110 says
        ("deflate", _deflate(TEXT, -zlib.MAX_WBITS)),  # raw, as some servers send it
    ],
)
def test_each_coding_whole_and_byte_by_byte(coding: str, encoded: bytes) -> None:
    assert _all(BodyDecoder([coding]), encoded) == TEXT
    decoder = BodyDecoder([coding])
    assert _all(decoder, *(encoded[i : i + 1] for i in range(len(encoded)))) == TEXT
    assert decoder.reason is None and decoder.bytes_in == len(encoded)
    assert decoder.bytes_out == len(TEXT)


def test_stacked_codings_and_gzip_members_in_a_row() -> None:
    twice = gzip.compress(_deflate(TEXT, zlib.MAX_WBITS))
    assert _all(BodyDecoder(["deflate", "gzip"]), twice) == TEXT
    members = gzip.compress(b"one ") + gzip.compress(b"two")
    assert _all(BodyDecoder(["gzip"]), members, b"\0\0\0") == b"one two"  # padding ignored


def test_members_past_the_bound_are_not_read() -> None:
    decoder = BodyDecoder(["gzip"])
    out = _all(decoder, b"".join(gzip.compress(b"x") for _ in range(MAX_MEMBERS + 5)))
    assert out == b"x" * MAX_MEMBERS


def test_a_bomb_stops_at_the_bound_in_bounded_pieces() -> None:
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))  # ~8 KiB in, 8 MiB out
    decoder = BodyDecoder(["gzip"], max_bytes=1_000_000)
    sizes = [len(out) for out in decoder.decode(bomb)]
    assert sum(sizes) == 1_000_000 and max(sizes) <= PIECE_BYTES
    assert decoder.reason == "decoded body over 1000000 bytes: rest not read"
    assert list(decoder.decode(bomb)) == []  # stopped: nothing more, whatever comes


def test_bad_data_unsupported_codings_and_gaps_say_why() -> None:
    decoder = BodyDecoder(["gzip"])
    assert _all(decoder, b"not gzip at all") == b""
    assert decoder.reason is not None and decoder.reason.startswith("content-encoding gzip: bad")
    brotli = BodyDecoder(["br"])
    assert _all(brotli, b"\x1b\x00") == b"" and brotli.reason == "content-encoding br not decoded"
    encoded = gzip.compress(TEXT)
    cut = BodyDecoder(["gzip"])
    first = _all(cut, encoded[: len(encoded) // 2])
    cut.gap()
    assert _all(cut, encoded[len(encoded) // 2 :]) == b"" and TEXT.startswith(first)
    assert cut.reason == "bytes lost inside a compressed body: rest not read"


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=3000),
    st.sampled_from(["gzip", "deflate"]),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_any_split_decodes_to_the_same_bytes(data: bytes, coding: str, cuts: list[int]) -> None:
    encoded = gzip.compress(data) if coding == "gzip" else _deflate(data, zlib.MAX_WBITS)
    edges = [0, *sorted({c for c in cuts if c < len(encoded)}), len(encoded)]
    decoder = BodyDecoder([coding])
    assert _all(decoder, *(encoded[a:b] for a, b in itertools.pairwise(edges))) == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["gzip", "deflate", "gzip, deflate"]))
def test_hostile_bytes_never_raise(data: bytes, header: str) -> None:
    decoder = BodyDecoder(codings_of(header), max_bytes=10_000)
    assert len(_all(decoder, data[:100], data[100:])) <= 10_000


def test_a_gzip_stream_keeps_each_token_at_its_compressed_piece_time() -> None:
    analyzer = decoding(ResponseAnalyzer("chat.completions", 200, "text/event-stream"), "gzip")
    assert isinstance(analyzer, DecodingAnalyzer)
    events = [chat_delta("a"), chat_delta("b"), chat_delta("c")]
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    for i, event in enumerate(events):  # a server flushing after each event
        analyzer.feed(compressor.compress(sse(event)) + compressor.flush(zlib.Z_SYNC_FLUSH), i)
    tail = sse({"choices": [], "usage": usage(4, 3)}) + b"data: [DONE]\n\n"
    analyzer.feed(compressor.compress(tail) + compressor.flush(), 10)
    out = analyzer.finish(11, True, None)
    assert out.timeline.count == 3 and out.timeline.first_ns == 0
    assert (out.output_tokens, out.done, out.error) == (3, True, None)


def test_a_json_answer_sent_as_is_or_compressed() -> None:
    plain = ResponseAnalyzer("chat.completions", 200, "application/json")
    assert decoding(plain, None) is plain and decoding(plain, "identity") is plain
    analyzer = decoding(ResponseAnalyzer("chat.completions", 200, "application/json"), "gzip")
    encoded = gzip.compress(TEXT)
    analyzer.feed(encoded[:7], 5)
    analyzer.feed(encoded[7:], 9)
    out = analyzer.finish(9, True, None)
    assert out.timeline.count == 1 and out.timeline.first_ns == 9 and out.error is None


def test_an_undecodable_body_says_why_in_the_outcome() -> None:
    analyzer = decoding(ResponseAnalyzer("chat.completions", 200, "application/json"), "br")
    analyzer.feed(b"\x1b\x00\x00", 1)
    out = analyzer.finish(2, True, None)
    assert out.timeline.count == 0 and out.error == "content-encoding br not decoded"
    assert not out.failed


def test_a_body_the_collector_masked_is_not_read_and_says_why() -> None:
    decoder = BodyDecoder(["gzip"])
    assert _all(decoder, b"*" * 40, b"*" * 10) == b"" and decoder.reason == MASKED
    analyzer = decoding(ResponseAnalyzer("chat.completions", 200, "text/event-stream"), "gzip")
    analyzer.feed(b"*" * 30, 1)
    assert analyzer.finish(2, True, None).error == MASKED
