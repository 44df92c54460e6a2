"""A response body's Content-Encoding undone for the LLM readers, bounded. Pure.

HTTP clients ask for compression by default (httpx, requests and aiohttp send
``Accept-Encoding: gzip, deflate``), and a server or gateway that honours it sends a JSON answer
or even an SSE stream compressed: the readers would see no JSON and count no tokens. So the
body is decoded as it arrives, piece by piece, each decoded piece fed with the time of the
compressed piece that carried it (a token's arrival time stays the time its bytes arrived).

Codings: ``gzip`` (``x-gzip``; members one after another too) and ``deflate`` (zlib-wrapped as
RFC 9110 says, or raw as some servers send it), each or stacked (``gzip, gzip``), with the
standard library's zlib. ``br`` and ``zstd`` need packages not installed here (brotli,
zstandard): such a body is not read, and the outcome says why.

Bounds, since the peer chooses the bytes: at most MAX_DECODED_BYTES come out of one body (a
decompression bomb of a few KiB would otherwise give gigabytes); past it, decoding stops and
the outcome's error says so in one line. Output comes in pieces of at most PIECE_BYTES, so no
single piece is larger whatever the ratio. A gap (bytes not captured) ends decoding: a
compressed stream cannot be picked up mid-way.

Read this way: HTTP/1.1 responses (conversation.py) and HTTP/2 ones (h2_llm.py, the coding
from the response's HEADERS, http2.py).

What the collector does with such bodies (zerotrace_collector/redaction.py): it cannot mask
text it cannot read, and anyone reading Kafka could decompress it, so unless content is kept it
masks a compressed body whole (`*`, framing and lengths kept: an HTTP/1 body's Content-Length
and chunk-size lines, an HTTP/2 stream's DATA frame headers and padding). Such a body starts with
`*`, which no coding's first byte is (gzip's is 0x1f, zlib's 0x78 or alike; a raw deflate
body could in theory): it is not read, and the outcome says why (MASKED). With --keep-content
the bytes leave as captured and are decoded here. See README.md, "What leaves the node".
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zerotrace_correlator.llm_apis import LlmAnalyzer
    from zerotrace_correlator.openai_stream import LlmOutcome

__all__ = ["BodyDecoder", "DecodingAnalyzer", "decoding"]

MAX_DECODED_BYTES = 32 * 1024 * 1024
PIECE_BYTES = 64 * 1024
# gzip members after one another: past this many, the rest is not decoded (each is a new
# decompressor; a peer could send millions of empty ones).
MAX_MEMBERS = 64
MASKED = "compressed body masked on the node (--keep-content keeps it): not read"
_GZIP = ("gzip", "x-gzip")
_DEFLATE = ("deflate",)
_IDENTITY = ("", "identity")


class _Inflater:
    """One coding's zlib stream: gzip (members in a row), or deflate (wrapped or raw)."""

    def __init__(self, coding: str) -> None:
        self._gzip = coding in _GZIP
        self._obj: zlib._Decompress | None = (
            zlib.decompressobj(16 + zlib.MAX_WBITS) if self._gzip else None
        )
        self._members = 1
        self._fresh = True  # the current member gave nothing yet
        self._head = b""  # deflate: a first byte, until a second tells wrapped from raw
        self.done = False  # the stream ended; trailing bytes are ignored

    def pieces(self, data: bytes, room: list[int]) -> Iterator[bytes]:
        """*data* inflated, in pieces of at most PIECE_BYTES while room[0] (bytes still
        allowed out) lasts; raises zlib.error on bad data."""
        while data and not self.done and room[0] > 0:
            if self._obj is None:  # deflate: zlib header (RFC 1950) or raw deflate?
                data, self._head = self._head + data, b""
                if len(data) < 2:  # too few to tell
                    self._head = data
                    return
                wrapped = data[0] & 0x0F == 8 and int.from_bytes(data[:2], "big") % 31 == 0
                self._obj = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            obj = self._obj
            try:
                out = obj.decompress(data, min(PIECE_BYTES, room[0]))
            except zlib.error:
                if self._members > 1 and self._fresh:  # padding after a whole member
                    self.done = True
                    return
                raise
            room[0] -= len(out)
            if out:
                self._fresh = False
                yield out
            if obj.eof:
                if not self._gzip or self._members >= MAX_MEMBERS:
                    self.done = True
                    return
                data = obj.unused_data  # the next member, maybe in a later piece
                self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._members += 1
                self._fresh = True
            else:
                data = obj.unconsumed_tail
                if not out:
                    return


class BodyDecoder:
    """One body's codings undone as its pieces arrive (`decode`), bounded."""

    def __init__(self, codings: list[str], max_bytes: int = MAX_DECODED_BYTES) -> None:
        self.codings = codings  # as applied, outermost last (the header's order)
        unsupported = [c for c in codings if c not in _GZIP + _DEFLATE]
        self.reason: str | None = (
            f"content-encoding {', '.join(unsupported)} not decoded" if unsupported else None
        )
        self._steps = [] if unsupported else [_Inflater(c) for c in reversed(codings)]
        self._room = [max_bytes]
        self._max = max_bytes
        self.bytes_in = 0
        self.bytes_out = 0

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes *data* completes, in pieces of at most PIECE_BYTES; nothing once
        decoding stopped (unsupported coding, bad data, a gap, the bound reached)."""
        if self.stopped or not data:
            return
        if not self.bytes_in and data[:1] == b"*":  # no coding's first byte: a masked body
            self.reason = MASKED
            return
        self.bytes_in += len(data)
        try:
            for piece in self._through(data, 0):
                self.bytes_out += len(piece)
                yield piece
        except zlib.error as exc:
            self.reason = f"content-encoding {', '.join(self.codings)}: bad data ({exc})"
            return
        if self._room[0] <= 0 and not self.stopped:
            self.reason = f"decoded body over {self._max} bytes: rest not read"

    def _through(self, data: bytes, step: int) -> Iterator[bytes]:
        if step == len(self._steps):
            yield data
            return
        inner = self._steps[step]
        last = step == len(self._steps) - 1
        room = self._room if last else [self._max]  # the bound counts what comes out last
        for piece in inner.pieces(data, room):
            yield from self._through(piece, step + 1)

    def gap(self) -> None:
        """Bytes were lost: a compressed stream cannot go on after them."""
        if not self.stopped:
            self.reason = "bytes lost inside a compressed body: rest not read"


def codings_of(header: str | None) -> list[str]:
    """The codings a Content-Encoding value names, in the order applied, identity left out."""
    if not header:
        return []
    return [c for c in (p.strip().lower() for p in header.split(",")) if c not in _IDENTITY]


class DecodingAnalyzer:
    """An LLM analyzer fed a compressed body: decodes each piece and feeds the result with
    the piece's time; the outcome's error says why decoding stopped, if it did."""

    def __init__(self, inner: LlmAnalyzer, decoder: BodyDecoder) -> None:
        self.inner = inner
        self.decoder = decoder

    @property
    def body_limit_hit(self) -> bool:
        return self.inner.body_limit_hit

    @body_limit_hit.setter
    def body_limit_hit(self, value: bool) -> None:
        self.inner.body_limit_hit = value

    @property
    def errors_dropped(self) -> int:
        return self.inner.errors_dropped

    @errors_dropped.setter
    def errors_dropped(self, value: int) -> None:
        self.inner.errors_dropped = value

    @property
    def sse_truncated_events(self) -> int:
        return self.inner.sse_truncated_events

    def buffered_bytes(self) -> int:
        return self.inner.buffered_bytes()

    def feed(self, data: bytes, time_ns: int) -> None:
        for piece in self.decoder.decode(data):
            self.inner.feed(piece, time_ns)

    def gap(self) -> None:
        self.decoder.gap()
        self.inner.gap()

    def finish(self, time_ns: int, complete: bool, reason: str | None) -> LlmOutcome:
        outcome = self.inner.finish(time_ns, complete, reason)
        why = self.decoder.reason
        if why is None or outcome.failed:  # the server's own error says more
            return outcome
        return dataclasses.replace(outcome, error=why)  # the cause of what the reader missed


def decoding(analyzer: LlmAnalyzer, content_encoding: str | None) -> LlmAnalyzer:
    """*analyzer* itself for a body sent as is; else one that decodes it first."""
    codings = codings_of(content_encoding)
    if not codings:
        return analyzer
    return DecodingAnalyzer(analyzer, BodyDecoder(codings))
