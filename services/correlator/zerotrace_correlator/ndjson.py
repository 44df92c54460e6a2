"""Newline-delimited JSON framing over the pieces of a response body (application/x-ndjson,
as Ollama streams). Pure.

A line ends at LF (a CR before it is dropped); blank lines are skipped. Each line carries the
time of the body piece that completed it (the one holding its LF): when the client could first
act on it. Lines are not parsed here; the reader of each API does that.
"""

from __future__ import annotations

from dataclasses import dataclass

# One line is kept up to this size. Ollama's lines are a few hundred bytes (its final line,
# with the durations and counts, under 1 KiB; a `context` array of a long /api/generate
# reply can reach a few hundred KiB). Past it the line is cut and flagged rather than
# growing the buffer with the peer's output.
MAX_LINE_BYTES = 1024 * 1024


@dataclass(slots=True)
class NdjsonLine:
    data: bytes  # without its line ending
    time_ns: int
    truncated: bool = False  # bytes past MAX_LINE_BYTES were dropped


class NdjsonDecoder:
    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_line_bytes
        self._line = bytearray()
        self._truncated = False
        self._skipping = False  # after a gap: drop bytes up to the next LF
        self._after_gap = False
        self.truncated_lines = 0  # lines cut at the size limit

    def buffered_bytes(self) -> int:
        return len(self._line)

    def feed(self, data: bytes, time_ns: int) -> list[NdjsonLine]:
        out: list[NdjsonLine] = []
        if not data:
            return out
        if self._after_gap:
            # The loss ended on a line boundary when what follows opens an object; otherwise
            # the rest of the cut line is dropped (a fragment that opens with `{` is dropped
            # later, as a line that is not JSON).
            self._after_gap = False
            self._skipping = data[:1] != b"{"
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if self._skipping:
                self._skipping = False
                continue
            self._keep(line)
            whole = bytes(self._line).removesuffix(b"\r")
            if whole.strip():
                out.append(NdjsonLine(whole, time_ns, self._truncated))
                self.truncated_lines += self._truncated
            self._line.clear()
            self._truncated = False
        if rest and not self._skipping:
            self._keep(rest)
        return out

    def resync(self) -> None:
        """Bytes of the stream were lost: drop the partial line."""
        self._line.clear()
        self._truncated = False
        self._skipping = False
        self._after_gap = True

    def _keep(self, piece: bytes) -> None:
        room = self._max - len(self._line)
        if len(piece) > room:
            self._truncated = True
            piece = piece[: max(0, room)]
        self._line += piece
