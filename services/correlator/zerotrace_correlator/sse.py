r"""Server-Sent Events framing over the pieces of a response body (WHATWG HTML, "Parsing an
event stream"). Pure.

Lines end in CRLF, LF or a lone CR, and an event ends at a blank line, so `\n\n`, `\r\n\r\n`,
`\n\r\n`, `\r\n\n` and `\r\r` all end one. A CR at the end of one piece followed by an LF at
the start of the next is one line ending, not two. Each event carries the time of the body piece
that completed it (the one holding its blank line): when the client could first act on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One event's data, and one line, are kept up to this size. OpenAI-compatible chunks are a
# few hundred bytes; the largest real events (the Responses API's final `response.completed`,
# which repeats the whole output) stay well under it. Past it the event is cut (and flagged)
# rather than growing the buffer with the peer's output.
MAX_EVENT_BYTES = 1024 * 1024

_LINE_END = re.compile(rb"[\r\n]")
_FIELD_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")


# Not frozen: one is made per token of every stream, and a frozen dataclass's __init__ pays a
# setattr call per field.
@dataclass(slots=True)
class SseEvent:
    data: str  # the data lines joined with "\n"
    event: str  # the `event:` field, "" when absent (the spec's "message")
    time_ns: int
    truncated: bool = False  # data past MAX_EVENT_BYTES was dropped


class SseDecoder:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._line = bytearray()
        self._data = bytearray()
        self._has_data = False
        self._event = ""
        self._skip_lf = False  # the previous piece ended in CR: a leading LF belongs to it
        self._truncated = False
        self._resyncing = False
        self._after_gap = False
        self._first_line = True
        self.truncated_events = 0  # events cut at the size limit

    def buffered_bytes(self) -> int:
        return len(self._line) + len(self._data)

    def feed(self, data: bytes, time_ns: int) -> list[SseEvent]:
        out: list[SseEvent] = []
        if not self._line and not self._skip_lf and b"\r" not in data:
            if (
                data[:6] == b"data: "
                and data[-2:] == b"\n\n"
                and data.count(b"\n") == 2
                and not (self._has_data or self._truncated or self._resyncing or self._after_gap)
                and len(data) <= self._max
            ):
                # One whole event of one data line, nothing pending: what a streaming server
                # writes per token. Taken without the line-by-line steps below (same result).
                self._first_line = False
                out.append(SseEvent(data[6:-2].decode("utf-8", "replace"), self._event, time_ns))
                self._event = ""
                return out
            # The common case (whole LF-ended lines, nothing pending): split them at once.
            lines = data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                self._take_line(line, time_ns, out)
            if rest:
                self._keep(self._line, rest)
            return out
        pos = 0
        if self._skip_lf and data[:1] == b"\n":
            pos = 1
        self._skip_lf = False
        while pos < len(data):
            match = _LINE_END.search(data, pos)
            if match is None:
                self._keep(self._line, data[pos:])
                break
            end = match.start()
            self._keep(self._line, data[pos:end])
            if data[end] == 0x0D:
                if end + 1 == len(data):
                    self._skip_lf = True
                elif data[end + 1] == 0x0A:
                    end += 1
            pos = end + 1
            self._line_done(time_ns, out)
        return out

    def resync(self) -> None:
        """Bytes of the stream were lost: drop the partial line and event. If the next line
        starts like a field (`data:`, `event:`, `id:`, a comment) the loss ended on a line
        boundary and decoding goes on; otherwise lines are ignored up to the next blank one,
        where a new event starts."""
        self._line.clear()
        self._reset_event()
        self._resyncing = True
        self._after_gap = True

    # -- internals ------------------------------------------------------------------------

    def _keep(self, buf: bytearray, piece: bytes) -> None:
        room = self._max - len(buf)
        if len(piece) > room:
            self._truncated = True
            piece = piece[: max(0, room)]
        buf += piece

    def _line_done(self, time_ns: int, out: list[SseEvent]) -> None:
        line = bytes(self._line)
        self._line.clear()
        self._take_line(line, time_ns, out)

    def _take_line(self, line: bytes, time_ns: int, out: list[SseEvent]) -> None:
        if len(line) > self._max:
            self._truncated = True
            line = line[: self._max]
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM may open the stream
        if self._after_gap:
            self._after_gap = False
            self._resyncing = bool(line) and not line.startswith(_FIELD_STARTS)
        if not line:
            if not self._resyncing and self._has_data:
                data = self._data[:-1] if self._data.endswith(b"\n") else self._data
                event = SseEvent(
                    bytes(data).decode("utf-8", "replace"), self._event, time_ns, self._truncated
                )
                self.truncated_events += event.truncated
                out.append(event)
            self._resyncing = False
            self._reset_event()
            return
        if self._resyncing or line[:1] == b":":  # comments keep proxies from timing out
            return
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._keep(self._data, value + b"\n")
            self._has_data = True
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")

    def _reset_event(self) -> None:
        self._data.clear()
        self._has_data = False
        self._event = ""
        self._truncated = False
