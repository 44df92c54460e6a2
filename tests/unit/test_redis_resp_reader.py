"""Framing of RESP values (zerotrace_correlator/redis_resp_reader.py): what a Message keeps of
each kind of value, its size and times, the prefixes cut at KEEP_BYTES, attributes and
streamed values, and the buffers' bound under any input."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator.redis_resp_reader import (
    INLINE,
    KEEP_BYTES,
    MAX_LINE_BYTES,
    Message,
    RespReader,
)

pytestmark = pytest.mark.unit


def read(
    wire: bytes, requests: bool = False, keep_items: int = 3
) -> tuple[RespReader, list[Message]]:
    reader = RespReader(requests, keep_items)
    return reader, reader.feed(wire, 5, 6)


def test_a_command_keeps_its_arguments_up_to_keep_items() -> None:
    wire = b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$2\r\nxy\r\n"
    reader, (message,) = read(wire, requests=True, keep_items=3)
    assert message == Message(ord("*"), b"", [b"SET", b"k", b""], 4, 5, 6, len(wire))
    assert reader.buffered_bytes() == 0 and reader.error == ""


def test_an_inline_command_is_split_on_whitespace() -> None:
    _, messages = read(b"\r\n  PING \r\nECHO  a\tb\n", requests=True, keep_items=8)
    assert [(m.type, m.items, m.count, m.size) for m in messages] == [
        (INLINE, [b"PING"], 1, 9),
        (INLINE, [b"ECHO", b"a", b"b"], 3, 10),
    ]


def test_strings_are_kept_up_to_keep_bytes_plus_one() -> None:
    long = b"z" * 1000
    _, (top,) = read(b"$1000\r\n" + long + b"\r\n")
    assert top.scalar == long[: KEEP_BYTES + 1]
    _, (array,) = read(b"*2\r\n$1000\r\n" + long + b"\r\n+" + long + b"\r\n")
    assert array.items == [long[: KEEP_BYTES + 1], long[: KEEP_BYTES + 1]]


def test_replies_keep_their_direct_children_only() -> None:
    wire = b">4\r\n$7\r\nmessage\r\n*1\r\n+deep\r\n:3\r\n_\r\n"
    _, (message,) = read(wire)
    assert (message.type, message.items, message.count) == (ord(">"), [b"message", None, b"3"], 4)


def test_an_attribute_is_no_value_and_keeps_nothing() -> None:
    wire = b"|1\r\n+key\r\n+val\r\n*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n"
    _, (message,) = read(wire)
    assert (message.type, message.items, message.count, message.size) == (
        ord("*"),
        [b"1", b"2"],
        2,
        len(wire),
    )


def test_streamed_strings_and_aggregates_end_at_their_terminators() -> None:
    wire = b"$?\r\n;2\r\nab\r\n;0\r\n*?\r\n:1\r\n$?\r\n;1\r\nx\r\n;0\r\n.\r\n%?\r\n.\r\n"
    _, messages = read(wire)
    assert [(chr(m.type), m.count, m.items) for m in messages] == [
        ("$", 0, []),
        ("*", 2, [b"1", None]),
        ("%", 0, []),
    ]


def test_requests_refuse_what_redis_refuses_and_skip_empty_commands() -> None:
    reader, messages = read(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", requests=True)
    assert [m.items for m in messages] == [[b"PING"]] and messages[0].size == 14
    for wire in (b"*?\r\n", b"*1\r\n*1\r\n", b"*1\r\n$-1\r\n", b"*1\r\n$?\r\n"):
        reader, messages = read(wire, requests=True)
        assert messages == [] and reader.error, wire


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=10), st.booleans())
def test_any_bytes_any_split_never_raise_and_stay_bounded(
    data: bytes, cuts: list[int], requests: bool
) -> None:
    reader = RespReader(requests, keep_items=4)
    for a, b in pairwise(sorted({0, len(data), *(c for c in cuts if c < len(data))})):
        reader.feed(data[a:b], 1, 2)
        assert reader.buffered_bytes() <= reader.max_buffered
    assert reader.max_buffered == MAX_LINE_BYTES + 1 + 5 * (KEEP_BYTES + 1)


REPLIES = (
    b"+OK\r\n-ERR x\r\n:1\r\n$5\r\nhello\r\n$-1\r\n*2\r\n$1\r\na\r\n*1\r\n:2\r\n_\r\n#t\r\n"
    b",1.5\r\n(123\r\n!5\r\nERR y\r\n=7\r\ntxt:abc\r\n%1\r\n+k\r\n+v\r\n~1\r\n:1\r\n"
    b"|1\r\n+a\r\n+b\r\n:7\r\n>2\r\n$7\r\nmessage\r\n$2\r\n\r\n\r\n$?\r\n;1\r\nx\r\n;0\r\n"
    b"*?\r\n:1\r\n.\r\n"
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(REPLIES)), max_size=30))
def test_any_split_gives_the_same_messages(cuts: list[int]) -> None:
    whole = RespReader(False, 3).feed(REPLIES, 1, 2)
    assert len(whole) == 18 and sum(m.size for m in whole) == len(REPLIES)
    reader = RespReader(False, 3)
    bounds = sorted({0, len(REPLIES), *cuts})
    split = [m for a, b in pairwise(bounds) for m in reader.feed(REPLIES[a:b], 1, 2)]
    assert split == whole and reader.buffered_bytes() == 0


def test_a_piece_ending_inside_a_bulk_s_crlf_keeps_the_right_prefix() -> None:
    reader = RespReader(False, 3)
    assert reader.feed(b"$3\r\nabc\r", 1, 2) == []
    (message,) = reader.feed(b"\n", 3, 4)
    assert (message.scalar, message.size, message.start_ns, message.end_ns) == (b"abc", 9, 1, 4)
