from __future__ import annotations

import struct
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator import postgres_wire as wire
from zerotrace_correlator.postgres_wire import (
    CommandTag,
    Framer,
    ServerError,
    command_tag,
    cstring,
    server_error,
    startup_parameters,
)

pytestmark = pytest.mark.unit


def msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


STARTUP = struct.pack("!i", 4 + 4 + 10) + struct.pack("!i", 196608) + b"user\0app\0\0"


Message = tuple[int, bytes, int, int, int]


def frame(framer: Framer, pieces: list[bytes]) -> list[Message]:
    got: list[Message] = []

    def on_message(kind: int, body: bytes, size: int, start: int, end: int) -> None:
        got.append((kind, body, size, start, end))
        if kind == 0 and framer.client:
            framer.untyped = False  # what the parser does after a StartupMessage

    for piece in pieces:
        assert framer.feed(piece, 1, 2, on_message) == 0
    return got


def test_cstring() -> None:
    assert cstring(b"abc\0def\0", 0) == ("abc", 4)
    assert cstring(b"abc\0def\0", 4) == ("def", 8)
    assert cstring(b"cut off", 0) == ("cut off", 8)  # past the end: the string had no NUL
    assert cstring(b"\xff\xfe\0", 0) == ("\ufffd\ufffd", 3)


def test_startup_parameters() -> None:
    body = struct.pack("!i", 196608) + b"user\0app\0database\0shop\0\0"
    assert startup_parameters(body) == {"user": "app", "database": "shop"}
    assert startup_parameters(body[:9]) == {"user": ""}  # cut after a name
    assert startup_parameters(struct.pack("!i", 196608)) == {}


def test_server_error_fields() -> None:
    body = b"SERROR\0VERROR\0C42P01\0Mrelation missing\0Dsecret detail\0\0"
    assert server_error(body) == ServerError("42P01", "ERROR", "relation missing")
    localised = b"SFEHLER\0C23505\0Mdoppelt\0\0"  # no V field before PostgreSQL 9.6
    assert server_error(localised) == ServerError("23505", "FEHLER", "doppelt")
    assert server_error(b"SERROR\0Cbad!\0\0").code == ""
    assert server_error(b"SERROR\0C4") == ServerError("", "ERROR", "")  # cut off
    assert server_error(b"") == ServerError("", "", "")


@pytest.mark.parametrize(
    "tag, parsed",
    [
        (b"INSERT 0 5\0", CommandTag("INSERT", 5)),
        (b"SELECT 3\0", CommandTag("SELECT", 3)),
        (b"COPY 12\0", CommandTag("COPY", 12)),
        (b"CREATE TABLE\0", CommandTag("CREATE TABLE", None)),
        (b"BEGIN\0", CommandTag("BEGIN", None)),
        (b"\0", CommandTag("", None)),
        (b"UPDATE \xd9\xa3\0", CommandTag("UPDATE \u0663", None)),  # an Arabic-Indic digit
    ],
)
def test_command_tag(tag: bytes, parsed: CommandTag) -> None:
    assert command_tag(tag) == parsed


CLIENT_STREAM = (
    STARTUP
    + msg(b"p", b"hunter2\0")
    + msg(b"Q", b"SELECT 1\0")
    + msg(b"P", b"s\0SELECT $1\0\0\0")
    + msg(b"B", b"\0s\0" + b"\0\0\0\1" + struct.pack("!i", 5000) + bytes(5000) + b"\0\0")
    + msg(b"E", b"\0\0\0\0\0")
    + msg(b"S")
)
SERVER_STREAM = msg(b"R", bytes(4)) + msg(b"D", bytes(70_000)) + msg(b"C", b"SELECT 1\0")


def test_client_messages_keep_only_their_prefix() -> None:
    got = frame(Framer(client=True), [CLIENT_STREAM])
    assert [(chr(k) if k else "startup", len(body), size) for k, body, size, _, _ in got] == [
        ("startup", len(STARTUP) - 4, len(STARTUP)),
        ("p", 0, 13),  # a password: never kept
        ("Q", 9, 14),
        ("P", 14, 19),
        ("B", 2 * (wire.MAX_NAME_BYTES + 1), 5018),  # the names; the parameter values never
        ("E", 5, 10),
        ("S", 0, 5),
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(CLIENT_STREAM)), max_size=20))
def test_any_split_gives_the_same_messages(cuts: list[int]) -> None:
    points = sorted({0, len(CLIENT_STREAM), *cuts})
    pieces = [CLIENT_STREAM[a:b] for a, b in pairwise(points)]
    assert frame(Framer(client=True), pieces) == frame(Framer(client=True), [CLIENT_STREAM])
    server_points = sorted({0, len(SERVER_STREAM), *(c * 7 % len(SERVER_STREAM) for c in cuts)})
    server_pieces = [SERVER_STREAM[a:b] for a, b in pairwise(server_points)]
    expected = frame(Framer(client=False), [SERVER_STREAM])
    assert frame(Framer(client=False), server_pieces) == expected


def test_a_big_body_is_stepped_over_holding_a_header_at_most() -> None:
    framer = Framer(client=False)
    held = []
    for i in range(len(SERVER_STREAM)):
        frame(framer, [SERVER_STREAM[i : i + 1]])
        held.append(framer.held())
    assert max(held) <= 5 + wire.MAX_TAG_BYTES


def test_the_one_byte_answer_to_an_encryption_request() -> None:
    framer = Framer(client=False)
    framer.answer_next = True
    assert frame(framer, [b"N" + msg(b"R", bytes(4))]) == [
        (0, b"N", 1, 1, 2),
        (ord("R"), b"", 9, 1, 2),
    ]
    framer.answer_next = True  # an old server answers with an ErrorResponse instead
    assert [k for k, *_ in frame(framer, [msg(b"E", b"SFATAL\0\0")])] == [ord("E")]
    assert not framer.answer_next


def test_a_client_hello_after_ssl_request_stops_framing() -> None:
    framer = Framer(client=True)
    framer.tls_next = True
    left = framer.feed(b"\x16\x03\x01\x00\x05hello", 1, 2, lambda *_: None)
    assert (framer.stopped, left) == (wire.ENCRYPTED, 10)


def test_after_tls_was_accepted_a_server_hello_stops_framing_plaintext_does_not() -> None:
    framer = Framer(client=False)
    framer.tls_next = True
    left = framer.feed(b"\x16\x03\x03\x00\x05hello", 1, 2, lambda *_: None)
    assert (framer.stopped, left) == (wire.ENCRYPTED, 10)
    framer = Framer(client=False)  # the TLS probes' plaintext: the login's answers
    framer.tls_next = True
    assert [k for k, *_ in frame(framer, [msg(b"R", bytes(4)) + msg(b"Z", b"I")])] == [
        ord("R"),
        ord("Z"),
    ]
    assert not framer.tls_next and not framer.stopped


@pytest.mark.parametrize(
    "client, data, reason",
    [
        (True, struct.pack("!i", 7) + bytes(4), "startup message length 7 out of range"),
        (True, struct.pack("!i", 10_001) + bytes(4), "startup message length 10001 out of range"),
        (False, b"Q\0\0\0\x05x", "unknown server message type 0x51"),
        (True, msg(b"S", b"x"), "message 'S' length 5 out of range"),
        (False, b"D\x7f\xff\xff\xff", "message 'D' length 2147483647 out of range"),
    ],
)
def test_impossible_headers_stop_framing(client: bool, data: bytes, reason: str) -> None:
    framer = Framer(client=client)
    left = framer.feed(data, 1, 2, lambda *_: None)
    assert framer.stopped == reason
    assert left == len(data) - (4 if data[0] == 0 else 5)  # stopped after the header
    assert framer.held() == 0
    assert framer.feed(b"more", 3, 4, lambda *_: None) == 4  # stopped for good


def test_stop_from_inside_a_message_leaves_the_rest_unread() -> None:
    framer = Framer(client=False)
    data = msg(b"Z", b"I") + msg(b"Z", b"I")
    assert framer.feed(data, 1, 2, lambda *_: framer.stop("enough")) == 6


@pytest.mark.parametrize(
    "data, expected",
    [
        (STARTUP, True),
        (struct.pack("!ii", 8, wire.SSL_REQUEST), True),
        (struct.pack("!ii", 12, wire.SSL_REQUEST), False),
        (struct.pack("!iiii", 16, wire.CANCEL_REQUEST, 1, 2), True),
        (struct.pack("!ii", 40, 196608) + b"\x00\x01", False),  # Kafka Metadata v0's shape
        (msg(b"Q", b"SELECT 1\0"), True),
        (msg(b"Q", b"\0"), False),  # empty: nothing to judge by
    ],
)
def test_looks_like_first(data: bytes, expected: bool) -> None:
    assert wire.looks_like_first(data) is expected
