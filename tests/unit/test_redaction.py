"""Credentials and content masked before anything leaves the collector (redaction.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_collector.redaction import Redactor, StreamRedactor

pytestmark = pytest.mark.unit

KEY = b"sk-proj-Zx81bQ3mT4uV5wX6yZ7aB8cD9e"
PROMPT = 'Summarise "Q3 revenue" for ACME \\ confidential'

REQUEST = (
    b"POST /v1/chat/completions?api_key=k3y-123&user=ann HTTP/1.1\r\n"
    b"Host: llm.internal\r\n"
    b"Authorization: Bearer " + KEY + b"\r\n"
    b"Cookie: session=c00k1e; theme=dark\r\n"
    b"x-api-key: 0123456789abcdef\r\n"
    b"Content-Type: application/json\r\n"
    b"\r\n"
    + json.dumps(
        {
            "model": "llama-3.1-8b-instruct",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": PROMPT},
            ],
            "prompt": ["first prompt", "second prompt"],
            "stream": True,
            "api_key": "inline-secret",
        }
    ).encode()
)

# A chunked SSE answer whose second chunk boundary falls inside a content string.
RESPONSE = (
    b"HTTP/1.1 200 OK\r\n"
    b"Set-Cookie: id=s3cr3t-id; HttpOnly\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
    b'3b\r\ndata: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"Rev'
    b'\r\n27\r\nenue rose"},"finish_reason":null}]}\n\n\r\n'
    b'4e\r\ndata: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2}}\n\n\r\n'
    b"0\r\n\r\n"
)

JWT = b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlLWJ5dGVz"
SECRETS = [KEY, b"k3y-123", b"c00k1e", b"0123456789abcdef", b"inline-secret", b"s3cr3t-id"]
CONTENT = [b"Q3 revenue", b"ACME", b"You are terse", b"first prompt", b"Rev", b"enue rose"]


def test_credentials_and_content_are_masked_byte_for_byte() -> None:
    out = StreamRedactor().redact(REQUEST)
    assert len(out) == len(REQUEST)
    for secret in SECRETS + CONTENT:
        assert secret not in out
    assert b"Authorization: Bearer ****" in out  # the scheme says what kind it was
    assert b"?api_key=*******&user=ann HTTP/1.1\r\n" in out
    assert b"Host: llm.internal\r\n" in out
    body = json.loads(out.split(b"\r\n\r\n", 1)[1])
    assert body["model"] == "llama-3.1-8b-instruct"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == "*" * len("You are terse.")
    assert body["prompt"] == ["*" * 12, "*" * 13]
    assert body["stream"] is True
    assert body["api_key"] == "*" * len("inline-secret")


def test_a_chunk_boundary_inside_a_string_keeps_its_framing() -> None:
    out = StreamRedactor().redact(RESPONSE)
    assert len(out) == len(RESPONSE)
    assert b'"content":"***\r\n27\r\n*********"' in out  # the size line is framing: kept
    assert b"Set-Cookie: ********" in out
    assert b'"usage":{"prompt_tokens":12,"completion_tokens":2}' in out
    assert b"chat.completion.chunk" in out


def test_keep_content_masks_credentials_only() -> None:
    out = StreamRedactor(keep_content=True).redact(REQUEST)
    for secret in SECRETS:
        assert secret not in out
    assert json.dumps(PROMPT).encode() in out


@pytest.mark.parametrize(
    "text, masked",
    [
        (b'{"k":"ghp_' + b"a" * 36 + b'"}', b'{"k":"ghp_' + b"*" * 36 + b'"}'),
        (b"id AKIAABCDEFGHIJKLMNOP.", b"id AKIA" + b"*" * 17),
        (JWT + b" end", b"eyJ" + b"*" * (len(JWT) - 3) + b" end"),
        (b"task-manager sk-a", b"task-manager sk-*"),  # a word ending in sk is no key
        (b"GET /x?token=abc#f HTTP/1.1\r\n", b"GET /x?token=***#f HTTP/1.1\r\n"),
        (b"Proxy-Authorization: Basic dXNlcjpwYXNz\r\n", b"Proxy-Authorization: Basic ****"),
    ],
)
def test_token_shaped_values_keep_only_their_prefix(text: bytes, masked: bytes) -> None:
    out = StreamRedactor(keep_content=True).redact(text)
    assert out.startswith(masked)
    assert len(out) == len(text)


def test_nothing_to_mask_returns_the_same_bytes() -> None:
    plain = b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
    assert StreamRedactor().redact(plain) is plain


def test_a_call_captured_in_part_keeps_masking_until_a_new_message() -> None:
    stream = StreamRedactor()
    head = b'POST / HTTP/1.1\r\n\r\n{"content": "long secret te'
    assert stream.redact(head, complete=False).endswith(b'"content": "' + b"*" * 14)
    # The bytes after the capture's end were not seen: what follows is still masked ...
    assert stream.redact(b'xt", "n": 1}') == b'**", "n": 1}'
    # ... unless it starts a new message.
    stream.redact(b'{"content": "cut', complete=False)
    nxt = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
    assert stream.redact(nxt) == nxt


def test_streams_are_apart_and_forgotten_at_close() -> None:
    redactor = Redactor()
    out = redactor.redact("c1", "out", b'{"content": "abc')
    assert out == b'{"content": "***'
    assert redactor.redact("c1", "in", b'def"}') == b'def"}'  # the other direction
    assert redactor.redact("c1", "out", b'def"}') == b'***"}'
    redactor.redact("c1", "out", b'{"content": "abc')
    redactor.forget("c1")
    assert redactor.redact("c1", "out", b'def"}') == b'def"}'
    assert redactor.counters() == {"redacted": 0, "masked": 2, "h2_resync": 0}


def test_past_its_bound_the_table_starts_afresh_and_counts_it() -> None:
    redactor = Redactor(max_conns=2)
    for conn in ("a", "b", "c"):
        redactor.redact(conn, "out", b"x")
    assert redactor.dropped == 2


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([REQUEST, RESPONSE]),
    st.booleans(),
    st.lists(st.integers(min_value=1, max_value=len(RESPONSE)), max_size=6),
)
def test_any_split_into_calls_masks_what_one_call_does(
    stream: bytes, keep: bool, cuts: list[int]
) -> None:
    whole = StreamRedactor(keep).redact(stream)
    splitter = StreamRedactor(keep)
    edges = [0, *sorted({c for c in cuts if c < len(stream)}), len(stream)]
    pieces = [splitter.redact(stream[a:b]) for a, b in itertools.pairwise(edges)]
    assert b"".join(pieces) == whole


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.booleans(), st.integers(min_value=0, max_value=400))
def test_hostile_bytes_never_raise_and_keep_their_length(
    data: bytes, complete: bool, cut: int
) -> None:
    stream = StreamRedactor()
    for piece in (data[:cut], data[cut:]):
        assert len(stream.redact(piece, complete)) == len(piece)
