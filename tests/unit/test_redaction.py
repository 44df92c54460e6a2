"""Credentials and content masked before anything leaves the collector (redaction.py)."""

from __future__ import annotations

import gzip
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_collector.redaction import _SCHEMA_PREFIXES, Redactor, StreamRedactor

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


# -- content arrays: keys and schema words kept, every other string value masked ----------

PARTS = (
    b'{"model":"claude-x","content":[{"type":"text","text":"Hello there"},'
    b'{"type":"thinking","thinking":"hmm","signature":"c2lnbmF0dXJl"},'
    b'{"type":"tool_use","id":"toolu_1","name":"weather","input":{"Alice":"Paris"}},'
    b'{"type":"textual secret","role":"user","api_key":"' + KEY + b'"}],'
    b'"stop_reason":"end_turn"}'
)


def test_a_content_array_keeps_its_parts_keys_and_kinds() -> None:
    out = StreamRedactor().redact(PARTS)
    assert len(out) == len(PARTS)
    body = json.loads(out)
    text, thinking, tool, odd = body["content"]
    assert text == {"type": "text", "text": "*" * len("Hello there")}
    assert thinking == {"type": "thinking", "thinking": "***", "signature": "*" * 12}
    assert tool["type"] == "tool_use" and tool["id"] == "*" * 7
    # An object that is a member's value may be keyed by the user's data: masked whole.
    assert tool["input"] == {"*****": "*****"}
    # Not a schema word: masked from the first byte that leaves every known word.
    assert odd["type"] == "text" + "*" * len("ual secret") and odd["role"] == "user"
    assert odd["api_key"] == "*" * len(KEY)
    assert body["stop_reason"] == "end_turn" and body["model"] == "claude-x"


def test_a_responses_output_keeps_its_part_kinds() -> None:
    data = json.dumps(
        {
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Hi!", "annotations": []}],
                }
            ],
            "usage": {"input_tokens": 3},
        }
    ).encode()
    out = StreamRedactor().redact(data)
    assert len(out) == len(data)
    part = json.loads(out)["output"][0]["content"][0]
    assert part == {"type": "output_text", "text": "***", "annotations": []}


def test_keep_content_leaves_a_content_array_as_it_is() -> None:
    assert StreamRedactor(keep_content=True).redact(PARTS).count(b"Hello there") == 1


_JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.text(max_size=12),
    st.sampled_from(["text", "output_text", "user", "tex", "textual", "sk-" + "a" * 20]),
)
_JSON_KEYS = st.one_of(st.text(max_size=8), st.sampled_from(["type", "role", "text", "content"]))
_JSON_VALUE = st.recursive(
    _JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_JSON_KEYS, inner, max_size=4),
    max_leaves=20,
)


def _masked_like(raw: str, kept: int = 0) -> str:
    """A string's JSON body (its escapes as written) masked past its first *kept* bytes."""
    body = json.dumps(raw)[1:-1]
    return body[:kept] + "*" * (len(body) - kept)


def _schema_prefix(raw: str) -> int:
    body = json.dumps(raw)[1:-1].encode()
    return max(n for n in range(len(body) + 1) if body[:n] in _SCHEMA_PREFIXES)


def _expected(value: object, parent: str) -> object:
    """What masking makes of *value* inside a content array (*parent*: `[`, `{` for an
    element object, `<` for an object that is a member's value)."""
    if isinstance(value, str):
        return _masked_like(value)
    if isinstance(value, list):
        return [_expected(v, "[") for v in value]
    if not isinstance(value, dict):
        return value
    pairs: list[list[object]] = []
    for key, item in value.items():
        if parent != "[":  # keys masked, like any string
            pairs.append([_masked_like(key), _expected(item, "<")])
        elif isinstance(item, str) and key in ("type", "role"):
            pairs.append([key, _masked_like(item, _schema_prefix(item))])
        else:
            pairs.append([key, _expected(item, "<")])
    return {"pairs": pairs}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_JSON_VALUE, max_size=4),
    st.lists(st.integers(min_value=1, max_value=400), max_size=5),
)
def test_random_content_arrays_mask_values_keep_keys_and_lengths(
    parts: list[object], cuts: list[int]
) -> None:
    data = json.dumps({"model": "m", "content": parts, "n": 1}).encode()
    whole = StreamRedactor().redact(data)
    assert len(whole) == len(data)
    # Objects as their pairs: keys a masked map held may be alike.
    masked = json.loads(whole, object_pairs_hook=lambda p: {"pairs": [list(kv) for kv in p]})
    assert masked["pairs"] == [["model", "m"], ["content", _expected(parts, "[")], ["n", 1]]
    assert b"sk-aaaa" not in whole
    splitter = StreamRedactor()
    edges = [0, *sorted({c for c in cuts if c < len(data)}), len(data)]
    assert b"".join(splitter.redact(data[a:b]) for a, b in itertools.pairwise(edges)) == whole


# -- compressed bodies: masked whole unless content is kept, framing kept -----------------

_ANSWER = json.dumps({"choices": [{"message": {"content": PROMPT}}]}).encode()
_GZ = gzip.compress(_ANSWER)
GZIP_JSON = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Encoding: gzip\r\n"
    b"content-length: %d\r\n\r\n" % len(_GZ) + _GZ
)
_PLAIN_NEXT = b'HTTP/1.1 200 OK\r\ncontent-length: 21\r\n\r\n{"content": "secret"}'


def _chunked(pieces: list[bytes]) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


GZIP_CHUNKED = _chunked([_GZ[:10], _GZ[10:30], _GZ[30:]])


def test_a_compressed_body_is_masked_whole_keeping_its_framing() -> None:
    out = StreamRedactor().redact(GZIP_JSON + _PLAIN_NEXT)
    head = GZIP_JSON[: len(GZIP_JSON) - len(_GZ)]
    assert out == head + b"*" * len(_GZ) + _PLAIN_NEXT.replace(b"secret", b"******")
    out = StreamRedactor().redact(GZIP_CHUNKED)
    assert out == _chunked([b"*" * 10, b"*" * 20, b"*" * (len(_GZ) - 30)])


def test_keep_content_leaves_a_compressed_body_as_it_is() -> None:
    assert StreamRedactor(keep_content=True).redact(GZIP_CHUNKED) == GZIP_CHUNKED


def test_bodies_without_a_coding_or_without_a_body_are_not_masked_whole() -> None:
    plain = b"HTTP/1.1 200 OK\r\ncontent-encoding: identity\r\ncontent-length: 5\r\n\r\nhello"
    assert StreamRedactor().redact(plain) == plain
    empty = b"HTTP/1.1 304 Not Modified\r\ncontent-encoding: gzip\r\n\r\n"
    assert StreamRedactor().redact(empty + plain) == empty + plain


def test_a_compressed_body_captured_in_part_is_masked_until_a_new_message() -> None:
    stream = StreamRedactor()
    cut = len(GZIP_JSON) - 20
    assert stream.redact(GZIP_JSON[:cut], complete=False).endswith(b"*" * 10)
    assert stream.redact(b"lost bytes then more") == b"*" * 20  # where it ends is unknown
    assert stream.redact(b"HTTP/1.1 200 OK\r\n\r\nok") == b"HTTP/1.1 200 OK\r\n\r\nok"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([GZIP_JSON + _PLAIN_NEXT, GZIP_CHUNKED + GZIP_JSON]),
    st.lists(st.integers(min_value=1, max_value=len(GZIP_CHUNKED + GZIP_JSON)), max_size=6),
)
def test_any_split_masks_a_compressed_body_as_one_call_does(stream: bytes, cuts: list[int]) -> None:
    # The heads stay whole in one call (a head split across calls is not followed).
    heads = [i for i in range(len(stream)) if stream.startswith(b"HTTP/1.1", i)]
    ends = [stream.find(b"\r\n\r\n", h) + 4 for h in heads]
    cuts = [c for c in cuts if not any(h < c < e for h, e in zip(heads, ends, strict=True))]
    whole = StreamRedactor().redact(stream)
    splitter = StreamRedactor()
    edges = [0, *sorted({c for c in cuts if c < len(stream)}), len(stream)]
    pieces = [splitter.redact(stream[a:b]) for a, b in itertools.pairwise(edges)]
    assert b"".join(pieces) == whole
    assert _GZ[10:20] not in whole
