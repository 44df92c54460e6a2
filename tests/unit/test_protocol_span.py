"""The contract of protocol_span.py, checked on every parser the correlator uses
(protocols.PROTOCOLS): no parser raises on any bytes on either side, one that stops says why in
one line and gives nothing more from `feed`, `close` gives what waited as incomplete spans, and
no parser takes an empty first message, HTTP/1.1 or TLS for its own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtoSpan
from zerotrace_correlator.protocols import PROTOCOLS, ProtocolEntry

pytestmark = pytest.mark.unit

ENTRIES = pytest.mark.parametrize("entry", PROTOCOLS, ids=[e.name for e in PROTOCOLS])


@ENTRIES
def test_no_parser_takes_http_tls_or_nothing(entry: ProtocolEntry) -> None:
    for first in (b"", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00"):
        assert not entry.recognise(first)


@ENTRIES
@settings(max_examples=150, deadline=None)
@given(calls=st.lists(st.tuples(st.booleans(), st.binary(max_size=200)), max_size=12))
def test_any_bytes_on_either_side_never_raise(
    entry: ProtocolEntry, calls: list[tuple[bool, bytes]]
) -> None:
    parser = entry.make()
    t = 0
    for is_request, data in calls:
        t += 1_000
        stopped = bool(parser.error)
        spans = parser.feed(REQUEST if is_request else RESPONSE, data, t, t + 10)
        assert all(isinstance(s, ProtoSpan) for s in spans)
        if stopped:
            assert spans == []  # a parser that stopped gives nothing more
        assert "\n" not in parser.error  # one line
        assert all(isinstance(v, int) and v >= 0 for v in parser.counters.values())
    for span in parser.close(t + 1):
        assert span.status == "incomplete" and span.protocol == entry.name
