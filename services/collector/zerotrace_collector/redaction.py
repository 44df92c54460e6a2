"""Credentials and prompt text kept on the node (pure): what the collector does to every
captured payload before anything is published, spooled or written.

Two kinds of masking, each byte for byte (`*` over the value, the length unchanged, so HTTP
framing, chunk sizes, Content-Length, TCP sequence numbers and the correlator's token counts
still hold):

- credentials, always: the values of Authorization, Proxy-Authorization, Cookie, Set-Cookie,
  X-Api-Key, Api-Key (and a few vendors' equivalents) header lines, keeping an auth scheme
  word such as ``Bearer``; query-string parameters named like a key, token, secret or
  signature; JSON members named so (``"api_key": "..."``); and token-shaped values anywhere
  (``sk-...``, ``Bearer ...``, JWTs, GitHub, Slack, Hugging Face, AWS and Google keys),
  keeping only the prefix that says what kind of key it was.
- content, unless the user opts in (OpenTelemetry's GenAI rule: message content is captured
  only on request): JSON string values of the members that carry prompt or completion text
  (``content``, ``text``, ``prompt``, ``input``, ``arguments``, ``delta``, ...), and every
  string value inside such a member's array (``"prompt": ["..", ".."]``, ``"content": [{..}]``).
  Inside such an array the keys of the objects that are an array's elements (a part, a
  message, an output item) are kept: a member's name there is the API's schema, never the
  user's text (an object that is a member's value, such as a tool call's ``input``, may be
  keyed by the user's data: it is masked whole). So is the value of such an object's ``type``
  or ``role`` member as far as it spells a known schema word (``"text"``, ``"output_text"``,
  ``"thinking"``, ``"user"``): readers find a part's kind and its ``text``, masked to the same
  length. A value that is not such a word is masked from the first byte that leaves every
  known word (decided byte by byte, so a split across calls masks what one call masks).
  Model names, roles, ids, finish reasons and usage stay as they are: the correlator needs them.

Compressed bodies (a message whose head names a Content-Encoding other than ``identity``):
the scanner cannot read, so cannot mask, what is inside, and anyone reading Kafka could
decompress it. Unless content is kept, such a body is masked whole, byte for byte (FILL); its
framing is kept, so lengths and timings still hold. The correlator then says why it read no
tokens from it (content_encoding.py); with --keep-content the bytes leave as captured and the
correlator decodes them.
- HTTP/1: the framing kept is Content-Length and the chunk-size lines. Followed only where the
  message's head is whole in one call (a head split across calls is not, and its body leaves
  as captured); a call captured in part masks the rest of the body until a new message starts.
- HTTP/2 (`redaction_h2`): a stream whose HEADERS block names such a content-encoding (read
  by `redaction_hpack` in any HPACK form, a header block split anywhere included) has every
  later DATA payload byte filled until the stream ends; frame headers and padding are kept.
  Bytes whose framing was lost while such a stream is open are filled whole. Not told: a
  content-encoding that is a dynamic-table entry the redactor never saw (joined midway).

Why a scanner of trigger patterns and not an HTTP and JSON parser: it runs on every call a
traced server makes, in the collector, before the correlator has framed anything. One C-level
regex search finds the next thing to mask; Python runs only where something is masked. A
stream's state (inside a header value, a JSON string, an array of strings, a token) carries
over to the next call of the same connection and direction, and a short tail of the previous
call's bytes is searched again so a trigger split across two calls is still found. A call on
an idle stream (nothing open, no compressed body, not HTTP/2) after one that masked nothing
is first put through a pre-check (`_MARKS`: one translation, one search, three `find`s) that
proves, for most calls of a keep-alive exchange, that the scanner would find nothing; only
the calls it cannot clear are scanned, so it changes no byte (test_redaction_precheck.py).

Limits, on purpose:
- A raw CR or LF cannot be inside a JSON string, so inside one it is framing: a chunked body's
  size line (``\\r\\n1a\\r\\n``) is left as it is and the string goes on after it; any other
  line end ends the string.
- A call captured in part (payload shorter than the bytes it moved) loses the bytes between
  it and the next call: an open state is kept (over-masking is the safe side) unless the next
  call starts a new HTTP message, which resets it.

HTTP/2 is told apart by its first bytes (the client preface, frames) and handed to
`redaction_h2`, which walks the frames and HPACK and uses this scanner for header values and
DATA payloads.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Final

from zerotrace_collector.redaction_h2 import H2Redactor, after_h2c_upgrade, looks_h2
from zerotrace_collector.redaction_hpack import FILL  # `*`: the byte a masked one becomes

__all__ = ["RedactionCounts", "Redactor", "StreamRedactor"]

# Bytes of a call searched again with the next: longer than any trigger (`\nproxy-
# authorization: `, `"reasoning_content": "`); a key cut by the call's end is found at once.
TAIL: Final = 48

CREDENTIAL_HEADERS: Final = frozenset(
    (
        b"authorization", b"proxy-authorization", b"cookie", b"set-cookie", b"x-api-key",
        b"api-key", b"x-goog-api-key", b"x-auth-token", b"x-amz-security-token",
        b"x-csrf-token", b"x-xsrf-token", b"anthropic-api-key",
    )
)  # fmt: skip
_HEADERS: Final = b"|".join(re.escape(name) for name in sorted(CREDENTIAL_HEADERS))
_QUERY_KEYS: Final = (
    rb"api[_-]?key|key|token|access_token|id_token|auth|password|passwd|secret|client_secret"
    rb"|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token"
)
_JSON_CREDENTIALS: Final = (
    rb"api[_-]?key|apikey|access_token|refresh_token|id_token|token|password|passwd|secret"
    rb"|client_secret|authorization|private_key"
)
# Members whose string value is prompt or completion text, across the LLM APIs the
# correlator reads (OpenAI chat, completions and responses; Anthropic; Gemini; Ollama; TGI).
_CONTENT: Final = (
    rb"content|text|prompt|input|instructions|system|arguments|reasoning_content|reasoning"
    rb"|refusal|partial_json|thinking|delta|response|generated_text|query|document|suffix"
)
_CONTENT_ARRAYS: Final = rb"prompt|input|documents|texts|stop|content"
# Token shapes: a run of at least _TOKEN_RUN key characters starting with one of these.
_TOKEN_PREFIXES: Final = (
    b"sk-", b"sk_live_", b"rk_live_", b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_",
    b"github_pat_", b"xoxa-", b"xoxb-", b"xoxp-", b"xoxr-", b"xoxs-", b"hf_", b"glpat-",
    b"AKIA", b"ASIA", b"AIza", b"eyJ",
)  # fmt: skip
_TOKEN_RUN: Final = 16
_KEY_CHARS: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
# Key characters -> `a`, the rest -> space: a long run shows as `a` * _TOKEN_RUN in one C call.
_RUNS_OF_KEY_CHARS: Final = bytes(0x61 if b in _KEY_CHARS else 0x20 for b in range(256))
_LONG_RUN: Final = b"a" * _TOKEN_RUN
_WORD_BYTES: Final = frozenset(_KEY_CHARS)
_WS: Final = rb"[ \t\r\n]*"

# Why several searches and not one alternation: Python's regex engine tries every branch at
# every position; one pattern of them all cost ~20 us per 160-byte call here. Each search
# below starts with a literal (a line feed, a quote) that the engine skips to, or runs only
# when a C-level `in` says its trigger may be there: ~2 us per call with nothing to mask.
# They run on the call's bytes lowered (ASCII only, so every index stays the same).
_HEADER: Final = re.compile(rb"\n(?:" + _HEADERS + rb")[ \t]*:[ \t]*")
_HEADER_AT_START: Final = re.compile(rb"(?:" + _HEADERS + rb")[ \t]*:[ \t]*")
_QUERY: Final = re.compile(rb"[?&;](?:" + _QUERY_KEYS + rb")=")
_BEARER: Final = re.compile(rb"bearer[ \t]+")  # a literal first: the engine skips to it
# One pass over a call's quotes: a JSON credential member, or (unless content is kept) a
# content member or array.
_JSON_CREDENTIAL: Final = rb"(?P<jsoncred>" + _JSON_CREDENTIALS + rb')"' + _WS + b":" + _WS + b'"'
_JSON_WITH_CONTENT: Final = re.compile(
    rb'"(?:'
    + _JSON_CREDENTIAL
    + rb"|(?P<array>"
    + _CONTENT_ARRAYS
    + rb')"'
    + _WS
    + b":"
    + _WS
    + rb"\[|(?P<content>"
    + _CONTENT
    + rb')"'
    + _WS
    + b":"
    + _WS
    + b'")'
)
_JSON_CREDENTIALS_ONLY: Final = re.compile(rb'"(?:' + _JSON_CREDENTIAL + b")")

_SCHEMES: Final = rb"bearer|basic|digest|token|bot|negotiate|aws4-hmac-sha256"
_SCHEME: Final = re.compile(rb"(?i:" + _SCHEMES + rb")[ \t]+")
_SCHEME_WORDS: Final = b"|" + _SCHEMES  # `|word` each: a word's start is found as `|start`
_HEADER_VALUE: Final = re.compile(rb"[^\r\n]*")
_QUERY_VALUE: Final = re.compile(rb"[^&\s#\"'<>;]*")
_TOKEN_VALUE: Final = re.compile(rb"[A-Za-z0-9_\-.~+/=]*")
# A JSON string's body up to its closing quote, a line end, or a lone backslash at the end.
_STRING_BODY: Final = re.compile(rb'(?:[^"\\\r\n]|\\[^\r\n])*')
_CHUNK_LINE: Final = re.compile(rb"\r\n[0-9A-Fa-f]{1,8}(?:;[^\r\n]*)?\r\n")
_CHUNK_LINE_START: Final = re.compile(rb"\r(?:\n[0-9A-Fa-f]{0,8}(?:;[^\r\n]*)?\r?)?\Z")
_ARRAY_STEP: Final = re.compile(rb'[\[\]{}",:]')
# Members of an object inside a content array whose value is kept as far as it spells one of
# these words: the part's kind or the message's role (OpenAI chat, completions and responses;
# Anthropic; Gemini), never the user's text.
_SCHEMA_KEYS: Final = frozenset((b"type", b"role"))
_SCHEMA_WORDS: Final = (
    b"text", b"input_text", b"output_text", b"summary_text", b"reasoning_text", b"refusal",
    b"thinking", b"redacted_thinking", b"tool_use", b"tool_result", b"server_tool_use",
    b"web_search_tool_result", b"image", b"image_url", b"input_image", b"input_audio",
    b"input_file", b"file", b"document", b"audio", b"message", b"reasoning", b"function_call",
    b"function_call_output", b"search_result", b"json", b"user", b"assistant", b"system",
    b"developer", b"tool", b"model", b"function",
)  # fmt: skip
_SCHEMA_PREFIXES: Final = frozenset(w[:n] for w in _SCHEMA_WORDS for n in range(len(w) + 1))
_WORD_MAX: Final = max(len(w) for w in _SCHEMA_WORDS)
# Open containers tracked inside a content array; deeper ones count in `_deep`, their strings
# all masked as values (over-masking is the safe side).
_MAX_NESTING: Final = 64
_MESSAGE_START: Final = re.compile(rb"(?:[A-Z]{3,10} \S+ HTTP/1\.[01]\r?\n|HTTP/1\.[01] \d{3})")


def _spellings(alternation: bytes) -> list[bytes]:
    """The words an alternation of the patterns above spells (`api[_-]?key`: three)."""
    words = []
    for word in alternation.split(b"|"):
        if b"[_-]?" in word:
            words += [word.replace(b"[_-]?", sep) for sep in (b"", b"_", b"-")]
        else:
            words.append(word)
    assert all(re.fullmatch(rb"[a-z0-9_-]+", w) for w in words), "a word, not a pattern"
    return words


def _alternation(words: list[bytes]) -> bytes:
    """*words* as a regex whose every branch starts with its own literal byte (a trie):
    Python's engine tries a branch only where its first byte is, so a position where no
    word starts costs one comparison per first byte, not one per word."""
    groups: dict[bytes, list[bytes]] = {}
    for word in filter(None, words):
        groups.setdefault(word[:1], []).append(word[1:])
    if not groups:
        return b""
    branches = [re.escape(first) + _alternation(rest) for first, rest in sorted(groups.items())]
    if b"" in words:  # a word that ends here (`sig` beside `signature`): the rest optional
        return b"(?:" + b"|".join(branches) + b")?"
    return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"


# The pre-check of a call while its stream is idle (nothing open, no HTTP/2, no compressed
# body): a proof, with a few C calls, that `_triggers` finds nothing in it, so that the
# common call (a keep-alive request, a JSON answer, a header value, with nothing to mask)
# costs no Python-level scanning. Each trigger is reduced to a necessary condition; any call
# that meets one takes the scanner's whole path, so the pre-check can only cost time when it
# says "maybe", never change a byte of the output. On the call's bytes (the tail's too) put
# through _MARKS: key characters lowered as `lower` does, the bytes that start a header line,
# a query parameter or a JSON member (`\n`, `?`, `&`, `;`, `"`) all made `"`, `=` kept,
# every other byte a space. Then one search whose literal first byte the engine skips to:
# - `\n` + credential header (`_HEADER`; at the call's start, `_HEADER_AT_START`: the search
#   runs on `"` + bytes, so the start is such a position too) -> `"` + the name;
# - `[?&;]` + query key + `=` (`_QUERY`) -> `"` + the key + `=`;
# - `"` + JSON member + `"` (`_JSON_*`) -> `"` + the member + `"`.
# `bearer` and `ontent-encoding` (the C-level `in`s before `_BEARER` and `_compressed`) are
# found by `find` on the same bytes; tokens by `_token_starts`, as `_triggers` finds them.
_MARKS: Final = bytes(
    (b | 0x20 if 0x41 <= b <= 0x5A else b)
    if b in _KEY_CHARS
    else (0x22 if b in b'\n?&;"' else b if b == 0x3D else 0x20)
    for b in range(256)
)
_MARKED_WORDS: Final = [
    *CREDENTIAL_HEADERS,
    *(key + b"=" for key in _spellings(_QUERY_KEYS)),
    *(member + b'"' for member in _spellings(_JSON_CREDENTIALS)),
]
_CONTENT_WORDS: Final = [w + b'"' for w in _spellings(_CONTENT) + _spellings(_CONTENT_ARRAYS)]
_MAYBE_CREDENTIALS: Final = re.compile(b'"' + _alternation(_MARKED_WORDS))
_MAYBE_WITH_CONTENT: Final = re.compile(b'"' + _alternation(_MARKED_WORDS + _CONTENT_WORDS))

# Calls that may switch a stream to HTTP/2 (`_to_h2`): the client preface, a 101 to h2c.
_H2_STARTS: Final = (b"PRI *", b"HTTP/1.1 101 ")
# An HTTP/1 message's first line (group 1: a response's status), and its head's members that
# say its body is compressed and how it is framed (on the head's bytes lowered).
_HEAD_LINE: Final = re.compile(
    rb"(?:[A-Z]{3,10} \S+ HTTP/1\.[01]|HTTP/1\.[01] (\d{3}))[^\r\n]*\r?\n"
)
_CODING: Final = re.compile(rb"\ncontent-encoding[ \t]*:[ \t]*([^\r\n]*)")
_LENGTH: Final = re.compile(rb"\ncontent-length[ \t]*:[ \t]*(\d{1,18})[ \t]*\r?\n")
_CHUNKED: Final = re.compile(rb"\ntransfer-encoding[ \t]*:[^\r\n]*chunked")
# A call is looked at for a compressed body's head only when it holds one of these (C-level
# `in`, ~0.1 us; the head's regexes cost ~1 us a call): the header name as clients and servers
# spell it (any other mix of cases is not followed).
_CODING_NAMES: Final = (b"ontent-encoding", b"ontent-Encoding", b"ONTENT-ENCODING")
_MAX_SIZE_LINE: Final = 1024  # a chunk-size line longer than this: framing lost
# Where a compressed body's masking is.
_Z_NONE: Final = 0
_Z_LENGTH: Final = 1  # `_zleft` bytes of body to mask
_Z_TO_CLOSE: Final = 2  # all until a new message starts (no length, or framing lost)
_Z_SIZE: Final = 3  # in a chunk-size line (`_zline` so far)
_Z_DATA: Final = 4  # `_zleft` bytes of a chunk to mask
_Z_CRLF: Final = 5  # `_zleft` bytes of a chunk's line end, kept
_Z_LAST: Final = 6  # the last chunk's line end: then the message ends

# States a stream may be left in at the end of a call.
_NONE: Final = 0
_HEADER_OPEN: Final = 1  # inside a credential header's value: masked to the line end
_QUERY_OPEN: Final = 2  # inside a credential query parameter's value
_TOKEN_OPEN: Final = 3  # inside a token-shaped value
_STRING: Final = 4  # inside a masked JSON string
_ARRAY: Final = 5  # inside a content array: every string masked until its `]`
_ARRAY_STRING: Final = 6  # inside a string value of such an array: masked
_ARRAY_KEY: Final = 7  # inside a key of an object in such an array: kept
_ARRAY_SCHEMA: Final = 8  # inside a `type` or `role` value there: kept while a schema word


def _prefix_len(text: bytes, at: int) -> int:
    """How much of the token at *at* to keep: its prefix, which says what kind it was."""
    return next(len(p) for p in _TOKEN_PREFIXES if text.startswith(p, at))


def _tokens(text: bytes, start: int) -> list[tuple[int, int, str]]:
    """(start, end, "token") of each token's prefix from *start* on (`_triggers`)."""
    found = []
    runs = text.translate(_RUNS_OF_KEY_CHARS)
    at = runs.find(_LONG_RUN, start)
    while at >= 0:  # each run of key characters long enough to be a key: its prefix?
        at = runs.rfind(b" ", 0, at) + 1
        if text.startswith(_TOKEN_PREFIXES, at):
            found.append((at, at + _prefix_len(text, at), "token"))
        end = runs.find(b" ", at)
        if end < 0:
            break
        at = runs.find(_LONG_RUN, end)
    if runs.endswith(b"a"):  # the call ends in key characters: a key cut short?
        at = max(runs.rfind(b" ") + 1, start)
        if len(text) - at < _TOKEN_RUN and text.startswith(_TOKEN_PREFIXES, at):
            found.append((at, at + _prefix_len(text, at), "token"))
    return found


class RedactionCounts:
    """What was masked, shared by every stream of one redactor."""

    __slots__ = ("content", "credentials", "h2_resync")

    def __init__(self) -> None:
        self.credentials = 0  # credential values masked
        self.content = 0  # prompt or completion strings masked
        self.h2_resync = 0  # HTTP/2 framing lost (then text until frames again), or bodies

    def as_dict(self) -> dict[str, int]:
        return {"redacted": self.credentials, "masked": self.content, "h2_resync": self.h2_resync}


class StreamRedactor:
    """One direction of one connection: call `redact` with its calls' payloads in order."""

    __slots__ = (
        "_counts",
        "_deep",
        "_escape",
        "_expect_key",
        "_h2",
        "_http2",
        "_keep_content",
        "_maybe",
        "_pending",
        "_precheck",
        "_quiet",
        "_resume_back",
        "_schema_key",
        "_sniffed",
        "_stack",
        "_started",
        "_state",
        "_tail",
        "_word",
        "_zleft",
        "_zline",
        "_zmode",
    )

    def __init__(
        self,
        keep_content: bool = False,
        counts: RedactionCounts | None = None,
        http2: bool = True,
        *,
        precheck: bool = True,
    ) -> None:
        """*http2*: hand the stream to `H2Redactor` if it turns out to be HTTP/2 (off for the
        scanners that one uses itself). *precheck*: off, every call takes the scanner's whole
        path (the tests compare the two: the same bytes out)."""
        self._keep_content = keep_content
        self._precheck = precheck
        self._maybe = _MAYBE_CREDENTIALS if keep_content else _MAYBE_WITH_CONTENT
        # Idle since the last call (nothing open, not HTTP/2, no compressed body): the next
        # call may take the pre-check; set after each call that took the whole path.
        self._quiet = False
        self._counts = counts if counts is not None else RedactionCounts()
        self._http2 = http2
        self._started = not http2  # told HTTP/2 or not from the stream's first 9 bytes
        self._sniffed = b""  # the first calls' bytes while fewer than 9
        self._h2: H2Redactor | None = None
        self._state = _NONE
        self._escape = False  # _STRING / _ARRAY_STRING: the call ended on a backslash
        # Inside a content array: its open containers (`[`, `{`), past _MAX_NESTING counted in
        # _deep; whether the next string is an object's key; whether the last key was `type`
        # or `role`; the current key's or schema value's bytes (bounded).
        self._stack = bytearray()
        self._zmode = _Z_NONE  # a compressed body being masked (unless content is kept)
        self._zleft = 0
        self._zline = b""
        self._deep = 0
        self._expect_key = False
        self._schema_key = False
        self._word = b""
        self._tail = b""
        self._resume_back = 0  # tail bytes to scan again on resume (a split chunk-size line)
        # A trigger ended the previous call before its value began: it is found again with
        # the next call's bytes and dealt with then (so a split gives what no split gives).
        self._pending = False

    def redact(self, data: bytes, complete: bool = True) -> bytes:
        """*data* with its credentials (and, unless kept, its content) masked; the same
        object when nothing was. *complete*: False when the call moved more bytes than
        *data* holds (capture size), so the next call does not follow on from it."""
        if self._quiet and data and not (self._http2 and data.startswith(_H2_STARTS)):
            # The common call: `_text` when `_triggers` finds nothing (see _MARKS), told by
            # C calls; then only the tail moves on.
            tail = self._tail
            text = tail + data if tail else data
            marked = (b'"' + text).translate(_MARKS)
            if (
                self._maybe.search(marked) is None
                and marked.find(b"bearer") < 0
                and marked.find(b"ontent-encoding") < 0
                and (
                    (
                        text.translate(_RUNS_OF_KEY_CHARS).find(_LONG_RUN) < 0
                        and text[-1] not in _WORD_BYTES
                    )
                    or not _tokens(text, 0)
                )
            ):
                self._tail = text[-TAIL:] if complete else b""
                return data
        out = self._redact(data, complete)
        # The next call takes the pre-check if this one left the stream idle and masked
        # nothing (a stream that masks, such as a token stream, goes straight to the scanner).
        self._quiet = (
            out is data
            and self._precheck
            and self._state == _NONE
            and not self._pending
            and self._zmode == _Z_NONE
            and self._h2 is None
            and self._started
        )
        return out

    def _redact(self, data: bytes, complete: bool) -> bytes:
        if self._h2 is not None:
            return self._h2.redact(data, complete)
        if not data:
            if not complete:  # a gap: what follows does not continue the tail
                self._tail = b""
                self._pending = False
            return data
        if self._http2 and (not self._started or data.startswith(_H2_STARTS)):
            h2 = self._to_h2(data, complete)
            if h2 is not None:
                return h2
        return self._text(data, complete)

    def _text(self, data: bytes, complete: bool) -> bytes:
        if self._state != _NONE and _MESSAGE_START.match(data):
            self._state = _NONE  # a new message: what was open ended in bytes not seen
            self._tail = b""
            self._pending = False
        shift = len(self._tail)
        text = self._tail + data if shift else data
        low = text.lower()  # ASCII only: every index stays the same
        masks: list[tuple[int, int]] = []
        if not self._keep_content and (
            self._zmode != _Z_NONE
            # `find` first: one C call, where `any` over the spellings costs ~1 us
            or (low.find(b"ontent-encoding") >= 0 and any(name in data for name in _CODING_NAMES))
        ):
            self._compressed(data, shift, masks, complete)
        at = self._resume(text, shift, masks) if self._state != _NONE else shift
        if self._state == _NONE:
            at = self._scan(text, low, shift, at, masks)
        if complete:
            self._tail = text[-TAIL:]
        else:
            self._tail = b""
            self._pending = False
        if not masks:
            return data
        out = bytearray(data)
        for start, end in masks:
            start = max(start - shift, 0)
            end -= shift
            if end > start:
                out[start:end] = bytes((FILL,)) * (end - start)
        return bytes(out)

    @property
    def http2(self) -> bool:
        """Taken for HTTP/2: changed bytes may then be Huffman codes of `*`, not `*`."""
        return self._h2 is not None

    @property
    def open(self) -> bool:
        """The last call ended inside a value being masked, or on a trigger (`key=`)."""
        return self._state != _NONE or self._pending

    def _to_h2(self, data: bytes, complete: bool) -> bytes | None:
        """*data* redacted as HTTP/2 from where it starts (the stream's first 9 bytes, the
        preface, or the frames after a 101 to h2c), or None: it does not."""
        before, start = b"", 0
        if not self._started:
            seen = self._sniffed + data
            if len(seen) < 9 and complete:  # too few to tell: text for now
                self._sniffed = seen
                return None
            self._started, self._sniffed = True, b""
            if not looks_h2(seen):
                return None
            before = seen[: len(seen) - len(data)]  # a preface's or a frame's first bytes
        elif not data.startswith(b"PRI *"):
            start = after_h2c_upgrade(data)
            if start < 0:
                return None
        elif not looks_h2(data):
            return None
        head = self._text(data[:start], True) if start else b""
        keep, counts, precheck = self._keep_content, self._counts, self._precheck
        self._h2 = H2Redactor(
            lambda: StreamRedactor(True, counts, http2=False, precheck=precheck),
            lambda: StreamRedactor(keep, counts, http2=False, precheck=precheck),
            CREDENTIAL_HEADERS,
            counts,
            keep_content=keep,
        )
        self._h2.redact(before)
        return head + self._h2.redact(data[start:], complete)

    def _compressed(
        self, data: bytes, shift: int, masks: list[tuple[int, int]], complete: bool
    ) -> None:
        """Mask the compressed bodies in *data* (a call's bytes; masks go *shift* further),
        keeping their framing; follow them into the next calls."""
        if self._zmode == _Z_TO_CLOSE and _MESSAGE_START.match(data):
            self._zmode = _Z_NONE  # a new message: the body it was in ended unseen
        at, size = 0, len(data)
        while at < size:
            mode = self._zmode
            if mode == _Z_NONE:
                at = self._compressed_head(data, at)
                if at < 0:
                    break
            elif mode == _Z_TO_CLOSE:
                masks.append((shift + at, shift + size))
                break
            elif mode in (_Z_LENGTH, _Z_DATA):
                take = min(self._zleft, size - at)
                masks.append((shift + at, shift + at + take))
                self._zleft -= take
                at += take
                if not self._zleft:
                    self._zmode, self._zleft = (_Z_NONE, 0) if mode == _Z_LENGTH else (_Z_CRLF, 2)
            elif mode in (_Z_CRLF, _Z_LAST):
                take = min(self._zleft, size - at)
                self._zleft -= take
                at += take
                if not self._zleft:
                    self._zmode = _Z_SIZE if mode == _Z_CRLF else _Z_NONE
            else:  # _Z_SIZE
                end = data.find(b"\n", at)
                line = self._zline + data[at : size if end < 0 else end]
                at = size if end < 0 else end + 1
                if len(line) > _MAX_SIZE_LINE:
                    self._zmode = _Z_TO_CLOSE
                elif end < 0:
                    self._zline = line
                else:
                    self._zline = b""
                    digits = line.split(b";", 1)[0].strip()
                    try:
                        chunk = int(digits, 16)
                    except ValueError:
                        self._zmode = _Z_TO_CLOSE  # framing lost: the safe side
                        continue
                    self._zmode, self._zleft = (_Z_DATA, chunk) if chunk else (_Z_LAST, 2)
        if not complete and self._zmode != _Z_NONE:
            self._zmode = _Z_TO_CLOSE  # bytes not captured: where the body ends is unknown

    def _compressed_head(self, data: bytes, at: int) -> int:
        """From *at*, the next whole message head: where its body starts if compressed (the
        mode set), or past the head; -1 when there is none in *data*."""
        while True:
            m = _HEAD_LINE.search(data, at)
            if m is None:
                return -1
            if m.start() and data[m.start() - 1] != 0x0A:  # not at a line's start
                at = m.end()
                continue
            end = data.find(b"\r\n\r\n", m.start())
            if end < 0:
                return -1  # a head cut by the call's end: not followed
            body = end + 4
            head = data[m.start() : end + 2].lower()
            coding = _CODING.search(head)
            if coding is None or coding.group(1).strip() in (b"", b"identity"):
                return body
            status = m.group(1)
            if status is not None and (status[:1] == b"1" or status in (b"204", b"304")):
                return body
            length = _LENGTH.search(head)
            if _CHUNKED.search(head):
                self._zmode, self._zline = _Z_SIZE, b""
            elif length is not None:
                self._zmode, self._zleft = _Z_LENGTH, int(length.group(1))
                if not self._zleft:
                    self._zmode = _Z_NONE
            elif status is not None:
                self._zmode = _Z_TO_CLOSE
            else:
                return body  # a request without a length has no body
            self._counts.content += 1
            return body

    def _triggers(self, text: bytes, low: bytes, start: int) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every trigger from *start* on, in no order (*low*: *text*
        lowered)."""
        found = [(m.start(), m.end(), "header") for m in _HEADER.finditer(low, start)]
        if start == 0:
            m = _HEADER_AT_START.match(low)
            if m is not None:
                found.append((0, m.end(), "header"))
        if b"=" in text:
            found += [(m.start(), m.end(), "query") for m in _QUERY.finditer(low, start)]
        if b"bearer" in low:
            for m in _BEARER.finditer(low, start):
                if m.start() == 0 or low[m.start() - 1] not in _WORD_BYTES:
                    found.append((m.start(), m.end(), "bearer"))
        if b'"' in text:
            json = _JSON_CREDENTIALS_ONLY if self._keep_content else _JSON_WITH_CONTENT
            found += [(m.start(), m.end(), m.lastgroup or "") for m in json.finditer(low, start)]
        return found + _tokens(text, start)

    def _scan(
        self, text: bytes, low: bytes, shift: int, at: int, masks: list[tuple[int, int]]
    ) -> int:
        """Deal with the triggers from *at* on, in order (one may begin in the tail, none may
        end there)."""
        pending = self._pending
        self._pending = False
        start = 0 if at == shift else at  # from the tail's start: a trigger may straddle
        found = self._triggers(text, low, start)
        if not found:
            return len(text)
        found.sort()
        counts = self._counts
        for m_start, m_end, kind in found:
            if m_start < start:
                continue  # inside what the trigger before it masked
            if m_end < shift or (m_end == shift and not pending):
                continue  # wholly in the tail: the previous call dealt with it
            if m_end == len(text) and kind != "token":  # its value is in the next call, if any
                self._pending = True
                return len(text)
            value = m_end
            if kind == "content" or kind == "jsoncred":
                if kind == "content":
                    counts.content += 1
                else:
                    counts.credentials += 1
                self._escape = False
                start = self._string(text, value, masks, _STRING)
            elif kind == "array":
                counts.content += 1
                self._stack, self._deep, self._expect_key = bytearray(b"["), 0, False
                start = self._array(text, value, masks)
            else:
                counts.credentials += 1
                if kind == "header":
                    scheme = _SCHEME.match(text, value)
                    rest = text[value : value + 20]
                    if (
                        scheme is None
                        and len(text) - value < 20
                        and b"|" + rest.lower() in _SCHEME_WORDS
                    ):
                        counts.credentials -= 1
                        self._pending = True  # `Authorization: Bea`: the rest says more
                        return len(text)
                    value = scheme.end() if scheme else value
                    start = self._run(text, value, _HEADER_VALUE, masks, _HEADER_OPEN)
                elif kind == "query":
                    start = self._run(text, value, _QUERY_VALUE, masks, _QUERY_OPEN)
                else:  # bearer, token
                    start = self._run(text, value, _TOKEN_VALUE, masks, _TOKEN_OPEN)
            if self._state != _NONE:
                return len(text)
        return start

    def _resume(self, text: bytes, shift: int, masks: list[tuple[int, int]]) -> int:
        """Go on with the state the previous call ended in; where it ends, scanning for
        triggers goes on."""
        state = self._state
        at = shift - self._resume_back
        self._resume_back = 0
        if state == _HEADER_OPEN:
            return self._run(text, at, _HEADER_VALUE, masks, _HEADER_OPEN)
        if state == _QUERY_OPEN:
            return self._run(text, at, _QUERY_VALUE, masks, _QUERY_OPEN)
        if state == _TOKEN_OPEN:
            return self._run(text, at, _TOKEN_VALUE, masks, _TOKEN_OPEN)
        if state == _STRING:
            return self._string(text, at, masks, _STRING)
        if state in (_ARRAY_STRING, _ARRAY_KEY):
            at = self._string(text, at, masks, state)
            if self._state == state:
                return at
        elif state == _ARRAY_SCHEMA:
            at = self._schema(text, at, masks)
            if self._state != _ARRAY:
                return at
        return self._array(text, at, masks)

    def _run(
        self,
        text: bytes,
        at: int,
        value: re.Pattern[bytes],
        masks: list[tuple[int, int]],
        state: int,
    ) -> int:
        """Mask what *value* matches from *at*; a value that reaches the end stays open."""
        end = value.match(text, at).end()  # type: ignore[union-attr]  # `*`: always matches
        if end > at:
            masks.append((at, end))
        self._state = state if end == len(text) else _NONE
        return end

    def _string(self, text: bytes, at: int, masks: list[tuple[int, int]], state: int) -> int:
        """Mask a JSON string's body from *at* (just past its opening quote, or where the
        previous call left it); returns the index past its closing quote. Leaves the stream
        in *state* when the call ends inside the string, else in _NONE (_ARRAY for a string
        of an array). A key of an object in a content array (_ARRAY_KEY) is kept, not
        masked, its first bytes noted in `_word`."""
        closed_state = _NONE if state == _STRING else _ARRAY
        key = state == _ARRAY_KEY
        if self._escape and at < len(text):
            self._escape = False
            if key:
                self._word = b"\\"  # an escape: no schema key
            else:
                masks.append((at, at + 1))
            at += 1
        size = len(text)
        while True:
            end = _STRING_BODY.match(text, at).end()  # type: ignore[union-attr]
            if end > at:
                if not key:
                    masks.append((at, end))
                elif len(self._word) <= _WORD_MAX:
                    self._word += text[at : min(end, at + _WORD_MAX + 1)]
            if end == size:
                self._state = state
                return end
            byte = text[end]
            if byte == 0x22:  # the closing quote
                self._state = closed_state
                if key:
                    self._schema_key = self._word in _SCHEMA_KEYS
                return end + 1
            if byte == 0x5C:  # a backslash, the last byte of the call: escapes the next
                if not key:
                    masks.append((end, end + 1))
                self._escape = True
                self._state = state
                return size
            chunk = _CHUNK_LINE.match(text, end)
            if chunk is not None:  # a chunk boundary inside the string: framing, kept
                at = chunk.end()
                continue
            if _CHUNK_LINE_START.match(text, end):  # perhaps one, cut by the call's end
                self._resume_back = size - end
                self._state = state
                return size
            self._state = closed_state  # a bare line end: not JSON after all, or cut short
            return end

    def _array(self, text: bytes, at: int, masks: list[tuple[int, int]]) -> int:
        """Inside a content array: mask each string value until the bracket that closes it,
        keeping the keys of its objects and their `type` and `role` words."""
        size = len(text)
        stack = self._stack
        while True:
            m = _ARRAY_STEP.search(text, at)
            if m is None:
                self._state = _ARRAY
                return size
            byte = text[m.start()]
            at = m.end()
            in_object = not self._deep and stack[-1:] == b"{"
            if byte == 0x22:  # a string: a key, a schema value, or a value masked
                self._escape = False
                self._word = b""
                if in_object and self._expect_key:
                    state = _ARRAY_KEY
                    at = self._string(text, at, masks, state)
                elif in_object and self._schema_key:
                    self._schema_key = False
                    at = self._schema(text, at, masks)
                    state = _ARRAY_SCHEMA if self._state == _ARRAY_SCHEMA else _ARRAY_STRING
                else:
                    state = _ARRAY_STRING
                    at = self._string(text, at, masks, state)
                if self._state == state:
                    return at
            elif byte == 0x3A:  # `:`
                self._expect_key = False
            elif byte == 0x2C:  # `,`
                self._expect_key = in_object
                self._schema_key = False
            elif byte == 0x5B or byte == 0x7B:  # `[`, `{`
                # An object that is an array's element (a part, a message) keeps its keys;
                # one that is a member's value (a tool's `input`) may be keyed by the user's
                # data: `<`, its strings all masked.
                if byte == 0x7B and (self._deep or stack[-1:] != b"["):
                    byte = 0x3C
                if len(stack) < _MAX_NESTING and not self._deep:
                    stack.append(byte)
                else:
                    self._deep += 1
                self._expect_key = byte == 0x7B
                self._schema_key = False
            else:  # `]`, `}`
                if self._deep:
                    self._deep -= 1
                elif stack:
                    stack.pop()
                self._expect_key = False
                self._schema_key = False
                if not stack:
                    self._state = _NONE
                    return at

    def _schema(self, text: bytes, at: int, masks: list[tuple[int, int]]) -> int:
        """A `type` or `role` value from *at*: kept while its bytes spell the start of a schema
        word, masked as a string from the first byte that does not."""
        word = self._word
        size = len(text)
        while at < size:
            byte = text[at]
            if byte == 0x22:
                self._state = _ARRAY
                return at + 1
            longer = word + bytes((byte,))
            if longer not in _SCHEMA_PREFIXES:
                self._word = b""
                self._escape = False
                return self._string(text, at, masks, _ARRAY_STRING)
            word = longer
            at += 1
        self._word = word
        self._state = _ARRAY_SCHEMA
        return size


class Redactor:
    """Every stream of a source (a feed, a capture): a `StreamRedactor` per connection and
    stream key, forgotten when the connection closes. Bounded: past *max_conns* open
    connections all state is dropped (each stream then starts afresh: only a value split
    across that moment can be missed, and it is counted in `dropped`)."""

    def __init__(
        self, keep_content: bool = False, max_conns: int = 65_536, *, precheck: bool = True
    ) -> None:
        """*precheck*: as `StreamRedactor`'s (off only to compare the two paths)."""
        self.keep_content = keep_content
        self._precheck = precheck
        self.counts = RedactionCounts()
        self.dropped = 0
        self._max_conns = max_conns
        self._conns: dict[Hashable, dict[Hashable, StreamRedactor]] = {}

    def redact(self, conn: Hashable, stream: Hashable, data: bytes, complete: bool = True) -> bytes:
        streams = self._conns.get(conn)
        if streams is None:
            if len(self._conns) >= self._max_conns:
                self.dropped += len(self._conns)
                self._conns.clear()
            streams = self._conns[conn] = {}
        redactor = streams.get(stream)
        if redactor is None:
            redactor = streams[stream] = StreamRedactor(
                self.keep_content, self.counts, precheck=self._precheck
            )
        return redactor.redact(data, complete)

    def http2(self, conn: Hashable, stream: Hashable) -> bool:
        redactor = self._conns.get(conn, {}).get(stream)
        return redactor is not None and redactor.http2

    def forget(self, conn: Hashable) -> None:
        self._conns.pop(conn, None)

    def counters(self) -> dict[str, int]:
        return self.counts.as_dict()
