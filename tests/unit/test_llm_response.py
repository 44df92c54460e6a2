from __future__ import annotations

from typing import Any

import pytest

from zerotrace_correlator.llm_response import (
    LlmResponseReader,
    error_message,
    json_value,
    media_type,
)
from zerotrace_correlator.openai_stream import MAX_ERROR_CHARS, MAX_JSON_BODY_BYTES

pytestmark = pytest.mark.unit


class Echo(LlmResponseReader):
    """Each object with "t" is content; "e" is a server error; "end" ends the stream."""

    def _on_object(self, obj: dict[str, Any], event: str, time_ns: int) -> None:
        if "e" in obj:
            self._server_error(str(obj["e"]))
        if obj.get("t"):
            self.timeline.add(time_ns)
        self.done = self.done or bool(obj.get("end"))

    def _on_body(self, body: Any, time_ns: int) -> None:
        self.timeline.add(time_ns)


def test_helpers() -> None:
    assert media_type("Text/Event-Stream; charset=utf-8") == "text/event-stream"
    assert media_type(None) == ""
    assert json_value(b' {"a": 1} ') == {"a": 1}
    assert json_value("{} {}") is None and json_value("[" * 10_000) is None
    assert error_message([{"error": {"message": "m"}}]) == "m"
    assert error_message({"error": "plain"}) == "plain" and error_message(3) == "error"


def test_sse_and_ndjson_streams_reach_the_reader() -> None:
    sse = Echo("x", 200, "text/event-stream")
    sse.feed(b'data: {"t": 1}\n\ndata: {"end": true}\n\n', 5)
    outcome = sse.finish(6, True, None)
    assert outcome.stream and outcome.timeline.count == 1 and outcome.error is None

    lines = Echo("x", 200, "application/x-ndjson")
    lines.feed(b'{"t": 1}\n{"t"', 5)
    assert lines.buffered_bytes() == 4
    lines.feed(b": 1}\n", 7)
    outcome = lines.finish(8, True, None)
    assert outcome.timeline.count == 2 and outcome.error == "stream ended without a final event"


def test_errors_are_capped_and_cut() -> None:
    reader = Echo("x", 500, "text/event-stream")
    for i in range(10):
        reader.feed(b'data: {"e": "%d%s"}\n\n' % (i, b"!" * 1000), i)
    outcome = reader.finish(20, False, "reset")
    assert reader.errors_dropped == 2 and outcome.failed
    assert outcome.error is not None
    parts = outcome.error.split("; ")
    assert parts[0] == "http 500" and len(parts[1]) == len("stream error: ") + MAX_ERROR_CHARS
    assert parts[-2:] == ["2 more server errors", "stream aborted: reset"]


def test_body_is_bounded() -> None:
    reader = Echo("x", 200, "application/json")
    reader.feed(b"{" + b" " * MAX_JSON_BODY_BYTES, 1)
    reader.feed(b"}", 2)
    assert reader.body_limit_hit and reader.buffered_bytes() == MAX_JSON_BODY_BYTES
    outcome = reader.finish(3, True, None)
    assert outcome.timeline.count == 0 and not outcome.stream and reader.buffered_bytes() == 0

    reader = Echo("x", 200, "application/json")
    reader.feed(b"{}", 1)
    reader.gap()
    outcome = reader.finish(2, True, None)
    assert outcome.timeline.count == 1 and outcome.error == "capture truncated"
