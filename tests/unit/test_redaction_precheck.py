"""The redactor's pre-check (redaction.py, `_MARKS`): a call on an idle stream that it proves
has nothing to mask skips the scanner. It may only save time: with it on or off, every call
of every stream gives the same bytes, the same counts and the same state."""

from __future__ import annotations

import gzip
import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.h2_wire import client_wire, server_wire
from tests.unit.test_redaction import REQUEST, RESPONSE
from zerotrace_collector.redaction import (
    _MAYBE_CREDENTIALS,
    _MAYBE_WITH_CONTENT,
    CREDENTIAL_HEADERS,
    Redactor,
    StreamRedactor,
    _alternation,
)

pytestmark = pytest.mark.unit

KEEP_ALIVE = (
    b"GET /api/items/42 HTTP/1.1\r\nHost: shop\r\nConnection: keep-alive\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 07:45:10 GMT\r\n"
    b"X-Request-Id: 3f2a9c0e-8b7d-4f1a-9c3e-5d6b7a8f9e0d\r\n"
    b"Content-Type: application/json\r\nContent-Length: 30\r\n\r\n"
    b'{"item": 42, "name": "kettle"}',
)
SSE_CHUNK = (
    b'5f\r\ndata: {"object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":" bullet"},"finish_reason":null}]}\n\n\r\n'
)
GZIPPED = gzip.compress(b'{"content": "a secret prompt"}')
COMPRESSED = (
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(GZIPPED)
    + GZIPPED
)
# Pieces streams are made of: every trigger (in other cases too), what ends or opens a state,
# what turns a stream to HTTP/2, and what looks like a trigger but is not.
FRAGMENTS = [
    *(b"\r\n" + name + b": " for name in sorted(CREDENTIAL_HEADERS)),
    b"\nAuthorization:\t",
    b"PROXY-AUTHORIZATION",
    b"Bearer ",
    b"bEaReR\t",
    b"xbearer ",
    b"?api_key=",
    b"&Token=",
    b";sig=",
    b"?keys=",
    b'"content": "',
    b'"CONTENT"',
    b'"prompt": [',
    b'"messages":[{"role":"user","content":"hi"}]',
    b'"api-key":"',
    b'"type":"textual',
    b"sk-proj-Zx81bQ3mT4uV5wX6yZ7a",
    b"sk-",
    b"AKIAIOSFODNN7EXAMPLE",
    b"eyJhbGciOiJIUzI1NiJ9",
    b"ghp_",
    b"x" * 17,
    b"Content-Encoding: gzip\r\n",
    b"CONTENT-ENCODING: br\r\n",
    b"ontent-Encoding",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 7\r\n",
    b"HTTP/1.1 200 OK\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\n",
    b"\r\n\r\n",
    b"\r\n1a\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"HTTP/1.1 101 Switching\r\nUpgrade: h2c\r\n\r\n",
    b"\\",
    b'"',
    b"{",
    b"[",
    b"]",
    b"}",
    b":",
    b",",
    b" ",
    b"=",
    b"\x00\xff",
]
# Calls of their own: mostly nothing to mask, so that a stream is idle when a trigger comes,
# alone in its call, at its start or its end.
CLEAN = [
    b"GET /a/b?id=7&x=8 HTTP/1.1\r\n",
    b"Host: shop\r\nAccept: text/plain\r\n",
    b"\r\n",
    b'{"a": 1, "b": ["c"]}',
    b"hello world, the monkey key ",
    b"X-Request-Id: 3f2a9c0e-8b7d-4f1a-9c3e-5d6b7a8f9e0d\r\n",
    b"tokens=3",
    b"HTTP/1.1 204 No Content\r\n",
]
TRIGGERS = [
    b"Authorization: Basic dXNlcjpwYXNz\r\n",
    b"cookie: a=b\r\n",
    b"Bearer abc.def",
    b" bearer\tz",
    b"/x?token=abc&y=1",
    b";sig=ff ",
    b'"content": "hello"',
    b'"input": ["a", "b"]',
    b'"password":"p4ss"',
    b"sk-proj-Zx8",
    b" sk-proj-Zx81bQ3mT4uV5wX6yZ7a ",
    b"AKIA",
    b" eyJhbGciOiJIUzI1NiJ9 ",
    b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 4\r\n\r\nabcd",
    b"POST / HTTP/1.1\r\nContent-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc",
    # The body in the next calls, its head's coding out of the tail's reach.
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n"
    b"Server: a server far away from here, at least a tail's length\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
]

STREAMS = [
    REQUEST,
    RESPONSE,
    b"".join(KEEP_ALIVE * 3),
    SSE_CHUNK * 4,
    COMPRESSED + KEEP_ALIVE[1],
    client_wire(2, True, 0),
    server_wire(2, False, 3),
]


def _calls(stream: bytes, cuts: list[int], gaps: list[int]) -> list[tuple[bytes, bool]]:
    """*stream* cut into calls; those ending at an edge in *gaps* captured in part."""
    edges = [0, *sorted({c for c in cuts if 0 < c < len(stream)}), len(stream)]
    return [(stream[a:b], b not in gaps) for a, b in itertools.pairwise(edges)]


def _both_ways(calls: list[tuple[bytes, bool]], keep: bool) -> None:
    """The same calls through a stream with the pre-check and one without: all alike."""
    fast = Redactor(keep)
    slow = Redactor(keep, precheck=False)
    for i, (data, complete) in enumerate(calls):
        direction = i % 3 == 2  # a second stream interleaved
        out = fast.redact("conn", direction, data, complete)
        assert out == slow.redact("conn", direction, data, complete), (i, data)
        assert len(out) == len(data)
        assert fast.counters() == slow.counters()
        assert fast.http2("conn", direction) == slow.http2("conn", direction)
        fast_stream = fast._conns["conn"][direction]
        slow_stream = slow._conns["conn"][direction]
        assert fast_stream.open == slow_stream.open
        assert fast_stream._tail == slow_stream._tail


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=6)), max_size=40),
    st.booleans(),
    st.lists(st.integers(min_value=1, max_value=400), max_size=12),
    st.lists(st.integers(min_value=1, max_value=400), max_size=2),
)
def test_random_streams_of_triggers_mask_alike_with_the_precheck_on_and_off(
    pieces: list[bytes], keep: bool, cuts: list[int], gaps: list[int]
) -> None:
    stream = b"".join(pieces)
    _both_ways(_calls(stream, cuts, gaps), keep)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(CLEAN * 3 + TRIGGERS), min_size=1, max_size=3),
            st.sampled_from([True, True, True, False]),
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_triggers_alone_in_calls_among_quiet_ones_mask_alike_with_the_precheck_on_and_off(
    calls: list[tuple[list[bytes], bool]], keep: bool
) -> None:
    _both_ways([(b"".join(pieces), complete) for pieces, complete in calls], keep)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(range(len(STREAMS))),
    st.booleans(),
    st.lists(st.integers(min_value=1, max_value=2_000), max_size=12),
    st.lists(st.integers(min_value=1, max_value=2_000), max_size=1),
)
def test_http_llm_and_http2_streams_mask_alike_with_the_precheck_on_and_off(
    which: int, keep: bool, cuts: list[int], gaps: list[int]
) -> None:
    _both_ways(_calls(STREAMS[which], cuts, gaps), keep)


def test_a_keep_alive_exchange_with_nothing_to_mask_skips_the_scanner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scanned: list[bytes] = []
    text = StreamRedactor._text

    def counted(self: StreamRedactor, data: bytes, complete: bool) -> bytes:
        scanned.append(data)
        return text(self, data, complete)

    monkeypatch.setattr(StreamRedactor, "_text", counted)
    request, response = StreamRedactor(), StreamRedactor()
    for _ in range(10):
        assert request.redact(KEEP_ALIVE[0]) is KEEP_ALIVE[0]
        assert response.redact(KEEP_ALIVE[1]) is KEEP_ALIVE[1]
    assert scanned == list(KEEP_ALIVE)  # each stream's first call only


def test_a_call_with_something_to_mask_after_quiet_ones_is_masked() -> None:
    stream = StreamRedactor()
    for _ in range(3):
        stream.redact(KEEP_ALIVE[0])
    # A trigger split across two quiet-looking calls: found with the tail.
    assert stream.redact(b"GET / HTTP/1.1\r\nAuthoriz") == b"GET / HTTP/1.1\r\nAuthoriz"
    assert stream.redact(b"ation: Bearer abc\r\n\r\n") == b"ation: Bearer ***\r\n\r\n"
    assert stream.redact(b'{"content": "hi"}') == b'{"content": "**"}'
    assert stream.redact(KEEP_ALIVE[0]) is KEEP_ALIVE[0]


def test_the_precheck_finds_every_trigger_word() -> None:
    marked = [b'"' + name for name in CREDENTIAL_HEADERS]
    marked += [b'"api_key=', b'"apikey"', b'"x-amz-credential=', b'"token"', b'"sig=']
    for text in marked:
        assert _MAYBE_CREDENTIALS.search(text), text
        assert _MAYBE_WITH_CONTENT.search(text), text
    for text in (b'"content"', b'"reasoning_content"', b'"documents"', b'"stop"'):
        assert _MAYBE_CREDENTIALS.search(text) is None
        assert _MAYBE_WITH_CONTENT.search(text), text
    for text in (b'"contents"', b'"host', b"authorization", b'"tokens=', b'"signatur='):
        assert _MAYBE_WITH_CONTENT.search(text) is None, text


def test_alternation_spells_exactly_its_words() -> None:
    words = [b"sig", b"signature", b"sk-", b"key", b"api_key"]
    pattern = re.compile(_alternation(words))
    assert pattern.pattern == rb"(?:api_key|key|s(?:ig(?:nature)?|k\-))"
    assert [w for w in words if pattern.fullmatch(w)] == words
    assert [w for w in (b"si", b"signat", b"sk", b"api-key") if pattern.fullmatch(w)] == []
