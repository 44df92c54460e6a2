"""Redis spans (zerotrace_correlator/redis_resp.py): commands paired with replies of every
RESP2 and RESP3 type, pipelines, pushes and pub/sub, the database index, CLIENT REPLY,
db.query.text and its redaction, bounded and never-raising on hostile input, close(), and
recognise(). Wire bytes are built here by hand, per the RESP spec."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace_correlator.protocol_span import REQUEST, RESPONSE, ProtocolParser, ProtoSpan, Side
from zerotrace_correlator.redis_resp import (
    CUT_QUERY_TEXTS,
    MAX_PENDING_COMMANDS,
    MAX_QUERY_TEXT_CHARS,
    OVERFLOW_COMMANDS,
    PUBSUB_MESSAGES,
    PUSH_MESSAGES,
    SKIPPED_REPLIES,
    UNANSWERED_COMMANDS,
    UNPAIRED_REPLIES,
    RedisParser,
    recognise,
)
from zerotrace_correlator.redis_resp_reader import MAX_DEPTH, MAX_LINE_BYTES

pytestmark = pytest.mark.unit

# -- wire bytes, per https://redis.io/docs/latest/develop/reference/protocol-spec/ -----------


def bulk(value: bytes | str, kind: bytes = b"$") -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return kind + b"%d\r\n" % len(data) + data + b"\r\n"


def cmd(*args: bytes | str) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


def agg(kind: bytes, *items: bytes) -> bytes:
    """An aggregate of encoded items; maps and attributes count pairs."""
    count = len(items) // 2 if kind in b"%|" else len(items)
    return kind + b"%d\r\n" % count + b"".join(items)


def line(kind: bytes, text: str) -> bytes:
    return kind + text.encode() + b"\r\n"


OK = line(b"+", "OK")
# Every reply type, each answering one command; True where the reply is an error.
REPLIES: dict[str, tuple[bytes, bool]] = {
    "simple string": (OK, False),
    "error": (line(b"-", "ERR unknown command"), True),
    "integer": (line(b":", "-42"), False),
    "bulk": (bulk("hello"), False),
    "empty bulk": (bulk(""), False),
    "binary bulk with CRLF inside": (bulk(b"a\r\nb\x00\xff"), False),
    "RESP2 null bulk": (b"$-1\r\n", False),
    "array": (agg(b"*", bulk("a"), line(b":", "1")), False),
    "empty array": (b"*0\r\n", False),
    "RESP2 null array": (b"*-1\r\n", False),
    "nested array": (agg(b"*", agg(b"*", agg(b"*", OK)), b"*0\r\n"), False),
    "null": (b"_\r\n", False),
    "boolean": (b"#t\r\n", False),
    "double": (line(b",", "3.14"), False),
    "double inf": (line(b",", "-inf"), False),
    "double exponent": (line(b",", "1.5e-10"), False),
    "big number": (line(b"(", "3492890328409238509324850943850943825024385"), False),
    "bulk error": (bulk("SYNTAX invalid syntax", b"!"), True),
    "verbatim string": (bulk("txt:Some string", b"="), False),
    "map": (agg(b"%", line(b"+", "first"), line(b":", "1"), bulk("second"), b"_\r\n"), False),
    "set": (agg(b"~", line(b"+", "orange"), line(b"+", "apple")), False),
    "attribute then value": (
        agg(b"|", line(b"+", "key-popularity"), agg(b"%", bulk("a"), line(b",", "0.19")))
        + agg(b"*", line(b":", "2039123"), line(b":", "9543892")),
        False,
    ),
    "attribute inside an array": (agg(b"*", agg(b"|", OK, OK) + line(b":", "1"), OK), False),
    "streamed string": (b"$?\r\n;4\r\nHell\r\n;1\r\no\r\n;0\r\n", False),
    "streamed array": (b"*?\r\n:1\r\n+a\r\n.\r\n", False),
    "streamed map": (b"%?\r\n+a\r\n:1\r\n.\r\n", False),
}
INVALIDATE = agg(b">", bulk("invalidate"), agg(b"*", bulk("key")))


def spans_of(parser: RedisParser, requests: bytes, replies: bytes) -> list[ProtoSpan]:
    return parser.feed(REQUEST, requests, 10, 20) + parser.feed(RESPONSE, replies, 30, 40)


def attrs(span: ProtoSpan) -> dict[str, object]:
    return dict(span.attributes)


# -- pairing --------------------------------------------------------------------------------


def test_a_parser_keeps_the_protocol_parser_contract() -> None:
    parser: ProtocolParser = RedisParser()
    assert parser.protocol == names.PROTOCOL_REDIS == "redis"
    assert parser.error == "" and dict(parser.counters) == {}


@pytest.mark.parametrize("kind", sorted(REPLIES))
def test_every_reply_type_answers_one_command(kind: str) -> None:
    reply, is_error = REPLIES[kind]
    parser = RedisParser()
    (span,) = spans_of(parser, cmd("GET", "k"), reply)
    assert (span.name, span.start_ns, span.end_ns) == ("GET", 10, 40)
    assert span.status == ("error" if is_error else "ok")
    assert (span.request_bytes, span.response_bytes) == (len(cmd("GET", "k")), len(reply))
    assert parser.error == "" and parser.pending_commands() == 0
    assert parser.buffered_bytes() == 0


def test_a_pipeline_of_n_commands_pairs_n_replies_in_order() -> None:
    commands = [cmd("SET", "k", "v"), cmd("INCR", "n"), cmd("HSET", "h", "f", "v"), cmd("GET", "k")]
    replies = [OK, line(b":", "7"), line(b"-", "WRONGTYPE Operation against a key"), bulk("v")]
    parser = RedisParser()
    assert parser.feed(REQUEST, b"".join(commands), 10, 20) == []
    assert parser.pending_commands() == 4
    spans = parser.feed(RESPONSE, b"".join(replies), 30, 40)
    assert [(s.name, s.status, s.error_type) for s in spans] == [
        ("SET", "ok", ""),
        ("INCR", "ok", ""),
        ("HSET", "error", "WRONGTYPE"),
        ("GET", "ok", ""),
    ]
    assert [s.request_bytes for s in spans] == [len(c) for c in commands]
    assert [s.response_bytes for s in spans] == [len(r) for r in replies]
    assert attrs(spans[2]) == {
        names.ATTR_DB_SYSTEM_NAME: "redis",
        names.ATTR_DB_OPERATION_NAME: "HSET",
        names.ATTR_DB_QUERY_TEXT: "HSET ? ? ?",
        names.ATTR_DB_NAMESPACE: "0",
        names.ATTR_DB_RESPONSE_STATUS_CODE: "WRONGTYPE",
    }


def test_a_span_runs_from_the_first_request_byte_to_the_last_reply_byte() -> None:
    parser = RedisParser()
    wire, reply = cmd("GET", "key"), bulk("value")
    assert parser.feed(REQUEST, wire[:5], 100, 110) == []
    assert parser.feed(REQUEST, wire[5:], 120, 130) == []
    assert parser.feed(RESPONSE, reply[:3], 200, 210) == []
    (span,) = parser.feed(RESPONSE, reply[3:], 220, 230)
    assert (span.start_ns, span.end_ns) == (100, 230)


def test_inline_commands_are_commands_and_empty_lines_are_nothing() -> None:
    parser = RedisParser()
    spans = spans_of(parser, b"\r\nPING\r\n\nset k  v\n", line(b"+", "PONG") + OK)
    assert [(s.name, attrs(s)[names.ATTR_DB_QUERY_TEXT]) for s in spans] == [
        ("PING", "PING"),
        ("set", "set ? ?"),  # as sent: OpenTelemetry asks for no case normalisation
    ]
    assert [s.request_bytes for s in spans] == [len(b"PING\r\n"), len(b"set k  v\n")]


def test_resp3_pushes_between_replies_are_not_replies() -> None:
    parser = RedisParser()
    replies = INVALIDATE + OK + INVALIDATE + INVALIDATE + bulk("v")
    spans = spans_of(parser, cmd("SET", "k", "v") + cmd("GET", "k"), replies)
    assert [(s.name, s.response_bytes) for s in spans] == [("SET", len(OK)), ("GET", 7)]
    assert parser.counters == {PUSH_MESSAGES: 3}


def test_resp3_subscribe_ends_at_its_last_confirmation_and_messages_are_skipped() -> None:
    parser = RedisParser()
    confirm = [agg(b">", bulk("subscribe"), bulk(ch), line(b":", n)) for ch, n in ("a1", "b2")]
    message = agg(b">", bulk("message"), bulk("a"), bulk("hello"))
    assert parser.feed(REQUEST, cmd("SUBSCRIBE", "a", "b"), 10, 20) == []
    assert parser.feed(RESPONSE, confirm[0], 30, 40) == []
    (sub,) = parser.feed(RESPONSE, confirm[1] + message, 50, 60)
    assert (sub.name, sub.status, sub.end_ns) == ("SUBSCRIBE", "ok", 60)
    assert sub.response_bytes == len(confirm[0]) + len(confirm[1])
    (ping,) = spans_of(parser, cmd("PING"), message + line(b"+", "PONG"))
    assert ping.name == "PING" and ping.response_bytes == 7
    assert parser.counters == {PUSH_MESSAGES: 2}


def test_resp2_subscriber_mode_skips_messages_until_the_last_unsubscribe() -> None:
    def pubsub(kind: str, channel: str, count: str) -> bytes:
        return agg(b"*", bulk(kind), bulk(channel), line(b":", count))

    parser = RedisParser()
    assert spans_of(parser, cmd("SUBSCRIBE", "a", "b"), pubsub("subscribe", "a", "1")) == []
    (sub,) = parser.feed(RESPONSE, pubsub("subscribe", "b", "2"), 50, 60)
    assert sub.name == "SUBSCRIBE" and sub.end_ns == 60
    message = agg(b"*", bulk("message"), bulk("a"), bulk("hi"))
    zero = agg(b"*", bulk("message"), bulk("a"), bulk("0"))  # a payload, not a count
    pong = agg(b"*", bulk("pong"), bulk(""))  # PING in RESP2 subscriber mode
    (ping,) = spans_of(parser, cmd("PING"), message + zero + pong)
    assert ping.response_bytes == len(pong)
    # UNSUBSCRIBE without channels: one confirmation per channel; the first answers it.
    replies = pubsub("unsubscribe", "a", "1") + pubsub("unsubscribe", "b", "0")
    (unsub,) = spans_of(parser, cmd("UNSUBSCRIBE"), replies)
    assert unsub.name == "UNSUBSCRIBE"
    assert parser.counters == {PUBSUB_MESSAGES: 3}
    # Out of subscriber mode, an array that starts with "message" is an ordinary reply.
    (lrange,) = spans_of(parser, cmd("LRANGE", "l", "0", "-1"), message)
    assert lrange.name == "LRANGE" and parser.counters == {PUBSUB_MESSAGES: 3}


def test_replies_nobody_waits_for_are_counted() -> None:
    parser = RedisParser()
    assert parser.feed(RESPONSE, OK + bulk("x"), 1, 2) == []  # joined mid-connection
    assert parser.counters == {UNPAIRED_REPLIES: 2} and parser.error == ""
    (span,) = spans_of(parser, cmd("PING"), line(b"+", "PONG"))
    assert span.name == "PING"


# -- the database index ---------------------------------------------------------------------


def namespaces(spans: list[ProtoSpan]) -> list[object]:
    return [attrs(s).get(names.ATTR_DB_NAMESPACE) for s in spans]


def test_select_changes_db_namespace_once_answered_without_error() -> None:
    parser = RedisParser()
    wire = cmd("SELECT", "5") + cmd("GET", "k") + cmd("SELECT", "99") + cmd("GET", "k")
    spans = spans_of(parser, wire, OK + bulk("v") + line(b"-", "ERR DB index is out of range") + OK)
    assert namespaces(spans) == ["0", "5", "5", "5"]
    assert spans[2].error_type == "ERR"
    spans = spans_of(parser, cmd("RESET") + cmd("GET", "k"), line(b"+", "RESET") + b"$-1\r\n")
    assert namespaces(spans) == ["5", "0"]


def test_a_connection_joined_mid_way_has_no_namespace_until_a_select() -> None:
    parser = RedisParser(db_index=None)
    spans = spans_of(parser, cmd("GET", "k") + cmd("select", "3") + cmd("GET", "k"), OK * 3)
    assert namespaces(spans) == [None, None, "3"]


def test_select_inside_multi_makes_the_index_unknown() -> None:
    parser = RedisParser()
    wire = cmd("MULTI") + cmd("SELECT", "2") + cmd("EXEC") + cmd("GET", "k")
    replies = OK + line(b"+", "QUEUED") + agg(b"*", OK) + bulk("v")
    assert namespaces(spans_of(parser, wire, replies)) == ["0", "0", None, None]


# -- CLIENT REPLY ---------------------------------------------------------------------------


def test_client_reply_off_and_skip_commands_get_spans_without_replies() -> None:
    parser = RedisParser()
    wire = (
        cmd("CLIENT", "REPLY", "OFF") + cmd("SET", "a", "1")
        + cmd("CLIENT", "REPLY", "ON") + cmd("CLIENT", "REPLY", "SKIP") + cmd("SET", "b", "2")
        + cmd("GET", "a")
    )  # fmt: skip
    unanswered = parser.feed(REQUEST, wire, 10, 20)
    assert [(s.name, s.status, s.end_ns, s.response_bytes) for s in unanswered] == [
        ("CLIENT REPLY", "ok", 10, 0),
        ("SET", "ok", 10, 0),
        ("CLIENT REPLY", "ok", 10, 0),
        ("SET", "ok", 10, 0),
    ]
    answered = parser.feed(RESPONSE, OK + bulk("1"), 30, 40)
    assert [(s.name, s.response_bytes) for s in answered] == [("CLIENT REPLY", 5), ("GET", 7)]
    assert parser.counters == {UNANSWERED_COMMANDS: 4}


# -- db.query.text --------------------------------------------------------------------------


def text_of(*args: str, keep_text: bool = False) -> str:
    parser = RedisParser(keep_text=keep_text)
    (span,) = spans_of(parser, cmd(*args), OK)
    value = attrs(span)[names.ATTR_DB_QUERY_TEXT]
    assert isinstance(value, str)
    return value


@pytest.mark.parametrize(
    ("args", "sanitised", "kept"),
    [
        (("GET", "user:42"), "GET ?", "GET user:42"),
        (("HMSET", "h", "f", "Hello World"), "HMSET ? ? ?", "HMSET h f 'Hello World'"),
        (("CLIENT", "SETNAME", "web-1"), "CLIENT SETNAME ?", "CLIENT SETNAME web-1"),
        (("config", "get", "maxmemory"), "config get ?", "config get maxmemory"),
        (("XGROUP", "CREATE", "s", "g", "$"), "XGROUP CREATE ? ? ?", "XGROUP CREATE s g $"),
        (("COMMAND",), "COMMAND", "COMMAND"),
        (("SET", "k", ""), "SET ? ?", "SET k ''"),
        (("AUTH", "s3cret"), "AUTH ?", "AUTH ?"),
        (("AUTH", "alice", "s3cret"), "AUTH ? ?", "AUTH ? ?"),
        (
            ("HELLO", "3", "AUTH", "alice", "s3cret", "SETNAME", "w"),
            "HELLO ? ? ? ? ? ?",
            "HELLO 3 AUTH ? ? SETNAME w",
        ),
        (
            ("MIGRATE", "h", "6379", "", "0", "5000", "AUTH2", "u", "pw", "KEYS", "k"),
            "MIGRATE ? ? ? ? ? ? ? ? ? ?",
            "MIGRATE h 6379 '' 0 5000 AUTH2 ? ? KEYS k",
        ),
        (
            ("ACL", "SETUSER", "bob", "on", ">pw", "#ab12", "~k*"),
            "ACL SETUSER ? ? ? ? ?",
            "ACL SETUSER bob on ? ? ~k*",
        ),
        (
            ("CONFIG", "SET", "maxmemory", "1gb", "requirepass", "pw"),
            "CONFIG SET ? ? ? ?",
            "CONFIG SET maxmemory 1gb requirepass ?",
        ),
    ],
)
def test_query_text_replaces_arguments_unless_kept_and_never_shows_passwords(
    args: tuple[str, ...], sanitised: str, kept: str
) -> None:
    assert text_of(*args) == sanitised
    assert text_of(*args, keep_text=True) == kept


def test_kept_arguments_are_cut_and_long_texts_end_with_an_ellipsis() -> None:
    parser = RedisParser(keep_text=True)
    (span,) = spans_of(parser, cmd("SET", "k", "x" * 1000), OK)
    assert attrs(span)[names.ATTR_DB_QUERY_TEXT] == "SET k " + "x" * 128 + "…"
    args = ["MSET", *(f"key{i}" for i in range(2000))]
    for keep_text in (False, True):
        parser = RedisParser(keep_text=keep_text)
        (span,) = spans_of(parser, cmd(*args), OK)
        text = attrs(span)[names.ATTR_DB_QUERY_TEXT]
        assert isinstance(text, str) and text.endswith(" …")
        assert len(text) <= MAX_QUERY_TEXT_CHARS + 2
        assert parser.counters[CUT_QUERY_TEXTS] == 1


def test_evalsha_and_fcall_name_their_procedure() -> None:
    parser = RedisParser()
    wire = cmd("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0") + cmd("FCALL", "f", "0")
    spans = spans_of(parser, wire, OK + OK)
    assert [attrs(s)[names.ATTR_DB_STORED_PROCEDURE_NAME] for s in spans] == [
        "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
        "f",
    ]


def test_errors_give_their_prefix_or_other() -> None:
    parser = RedisParser()
    replies = (
        line(b"-", "MOVED 3999 127.0.0.1:6381")
        + line(b"-", "something went wrong")
        + bulk("EXECABORT Transaction discarded", b"!")
    )
    spans = spans_of(parser, cmd("GET", "a") + cmd("GET", "b") + cmd("EXEC"), replies)
    assert [(s.status, s.error_type) for s in spans] == [
        ("error", "MOVED"),
        ("error", "_OTHER"),
        ("error", "EXECABORT"),
    ]
    assert names.ATTR_DB_RESPONSE_STATUS_CODE not in attrs(spans[1])


# -- splits ---------------------------------------------------------------------------------

PIPELINE = b"".join(cmd("GET", f"k{i}") for i in range(len(REPLIES))) + cmd("HELLO", "3")
ANSWERS = b"".join(reply for reply, _ in REPLIES.values()) + INVALIDATE + agg(b"%", OK, OK)


def test_a_stream_fed_byte_by_byte_gives_the_same_spans() -> None:
    whole = spans_of(RedisParser(), PIPELINE, ANSWERS)
    parser = RedisParser()
    spans: list[ProtoSpan] = []
    for i in range(len(PIPELINE)):
        spans += parser.feed(REQUEST, PIPELINE[i : i + 1], 10, 20)
    for i in range(len(ANSWERS)):
        spans += parser.feed(RESPONSE, ANSWERS[i : i + 1], 30, 40)
    assert spans == whole and len(spans) == len(REPLIES) + 1
    assert [s.status for s in spans] == [
        *("error" if is_error else "ok" for _, is_error in REPLIES.values()),
        "ok",
    ]


def pieces(wire: bytes, cuts: list[int]) -> list[tuple[int, int]]:
    return list(pairwise(sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=40), st.lists(st.integers(0, 10_000), max_size=40))
def test_any_split_gives_the_same_spans_timed_by_the_reads_that_carried_them(
    request_cuts: list[int], reply_cuts: list[int]
) -> None:
    whole = spans_of(RedisParser(), PIPELINE, ANSWERS)
    parser = RedisParser()
    spans: list[ProtoSpan] = []
    # A read [a, b) starts at 10 * a and ends at 10 * b: a span starts when the read with its
    # first request byte started and ends when the read with its last reply byte ended.
    request_reads, reply_reads = pieces(PIPELINE, request_cuts), pieces(ANSWERS, reply_cuts)
    for a, b in request_reads:
        spans += parser.feed(REQUEST, PIPELINE[a:b], 10 * a, 10 * b)
    for a, b in reply_reads:
        spans += parser.feed(RESPONSE, ANSWERS[a:b], 10**6 + 10 * a, 10**6 + 10 * b)
    untimed = [
        (s.name, s.status, dict(s.attributes), s.request_bytes, s.response_bytes) for s in spans
    ]
    assert untimed == [
        (s.name, s.status, dict(s.attributes), s.request_bytes, s.response_bytes) for s in whole
    ]
    request_start = reply_end = 0
    for span in spans:
        first = next(a for a, b in request_reads if a <= request_start < b)
        reply_end += span.response_bytes
        last = next(b for a, b in reply_reads if a < reply_end <= b)
        assert (span.start_ns, span.end_ns) == (10 * first, 10**6 + 10 * last)
        request_start += span.request_bytes
        if span.name == "GET" and span is spans[-2]:
            reply_end += len(INVALIDATE)  # the push between the last two replies


# -- hostile input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("side", "wire", "reason"),
    [
        (RESPONSE, b"$999999999999\r\n", "declared length 999999999999 over the limit"),
        (RESPONSE, b"*99999999999\r\n", "declared length 99999999999 over the limit"),
        (REQUEST, b"*2\r\n$-5\r\n", "invalid length"),
        (RESPONSE, b"*1\r\n" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH}"),
        (RESPONSE, b"?what\r\n", "unexpected RESP type byte"),
        (RESPONSE, b"$3\r\nabcXY", "bulk string not followed by CRLF"),
        (RESPONSE, b":12x\r\n", "invalid : value"),
        (RESPONSE, b"#x\r\n", "invalid # value"),
        (RESPONSE, b"+OK\n", "line not ended by CRLF"),
        (RESPONSE, b"$?\r\n+x\r\n", "streamed string chunk expected"),
        (REQUEST, b"*2\r\n$3\r\nGET\r\n:1\r\n", "command argument is not a bulk string"),
        (REQUEST, b"\x16\x03\x01\x02\x00\x01\x00\n", "not a Redis command"),
        (REQUEST, b"x" * (MAX_LINE_BYTES + 2), "line longer than 64 KiB"),
    ],
)
def test_bytes_no_redis_peer_sends_stop_the_parser_with_a_reason(
    side: Side, wire: bytes, reason: str
) -> None:
    parser = RedisParser()
    assert parser.feed(REQUEST, cmd("GET", "k"), 10, 20) == []
    assert parser.feed(side, wire, 30, 40) == []
    assert reason in parser.error and parser.error.startswith(("request: ", "reply: "))
    assert parser.buffered_bytes() == 0
    assert parser.feed(RESPONSE, OK, 50, 60) == []  # terminal: nothing more
    (span,) = parser.close(70)
    assert (span.name, span.status, span.end_ns) == ("GET", "incomplete", 70)
    assert attrs(span)[names.ATTR_ERROR_MESSAGE] == parser.error


def test_depth_up_to_the_cap_is_read() -> None:
    reply = b"*1\r\n" * MAX_DEPTH + b":1\r\n"
    (span,) = spans_of(RedisParser(), cmd("EVAL", "return x", "0"), reply)
    assert span.status == "ok" and span.response_bytes == len(reply)


def test_a_huge_value_streams_through_in_bounded_memory() -> None:
    parser = RedisParser(keep_text=True)
    value = b"v" * (4 * 1024 * 1024)
    wire, reply = cmd("SET", "k", value), bulk(value)
    step = 65_521  # a prime: pieces end anywhere in the framing
    for at in range(0, len(wire), step):
        assert parser.feed(REQUEST, wire[at : at + step], 1, 2) == []
        assert parser.buffered_bytes() <= parser.max_buffered_bytes()
    spans = []
    for at in range(0, len(reply), step):
        spans += parser.feed(RESPONSE, reply[at : at + step], 3, 4)
        assert parser.buffered_bytes() <= parser.max_buffered_bytes()
    (span,) = spans
    assert (span.request_bytes, span.response_bytes) == (len(wire), len(reply))


def test_a_line_without_end_is_held_up_to_its_cap_only() -> None:
    parser = RedisParser()
    for _ in range(MAX_LINE_BYTES // 4096):
        parser.feed(RESPONSE, b"+" + b"y" * 4095, 1, 2)
        assert parser.error == "" and parser.buffered_bytes() <= MAX_LINE_BYTES + 1
    parser.feed(RESPONSE, b"yy", 1, 2)
    assert parser.error == "reply: line longer than 64 KiB" and parser.buffered_bytes() == 0


def test_past_the_pending_cap_commands_are_counted_and_their_replies_skipped() -> None:
    parser = RedisParser()
    extra = 10
    wire = cmd("INCR", "n") * (MAX_PENDING_COMMANDS + extra)
    assert parser.feed(REQUEST, wire, 1, 2) == []
    assert parser.pending_commands() == MAX_PENDING_COMMANDS
    assert parser.counters == {OVERFLOW_COMMANDS: extra}
    spans = parser.feed(RESPONSE, line(b":", "1") * (MAX_PENDING_COMMANDS + 2), 3, 4)
    assert len(spans) == MAX_PENDING_COMMANDS
    # Room again: a new command waits behind the rest of the skipped run and pairs right.
    assert parser.feed(REQUEST, cmd("GET", "k"), 5, 6) == []
    (span,) = parser.feed(RESPONSE, line(b":", "1") * (extra - 2) + bulk("v"), 7, 8)
    assert span.name == "GET" and span.response_bytes == 7
    assert parser.counters == {OVERFLOW_COMMANDS: extra, SKIPPED_REPLIES: extra}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=200)), max_size=12))
def test_garbage_never_raises_and_stays_bounded(feeds: list[tuple[bool, bytes]]) -> None:
    parser = RedisParser(keep_text=True)
    for is_request, data in feeds:
        parser.feed(REQUEST if is_request else RESPONSE, data, 1, 2)
        assert parser.buffered_bytes() <= parser.max_buffered_bytes()
        assert parser.pending_commands() <= MAX_PENDING_COMMANDS
    assert all(s.status == "incomplete" for s in parser.close(3))


def not_push(value: bytes) -> bytes:
    """A push answers nothing: one in a reply's place is wrapped in an array."""
    return b"*1\r\n" + value if value[:1] == b">" else value


RESP_VALUE = st.recursive(
    st.one_of(
        st.binary(max_size=30).map(bulk),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: b":%d\r\n" % i),  # RESP: signed 64-bit
        st.text("abc XYZ-", max_size=10).map(lambda t: line(b"+", t)),
        st.sampled_from([b"_\r\n", b"#f\r\n", b",-1.5\r\n", b"(12345678901234567890\r\n"]),
        st.sampled_from([b"$-1\r\n", b"*-1\r\n", bulk("txt:x", b"=")]),
    ),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from([b"*", b"~", b">"]), st.lists(inner, max_size=4)).map(
            lambda t: agg(t[0], *t[1])
        ),
        st.lists(st.tuples(inner, inner), max_size=3).map(
            lambda pairs: agg(b"%", *(x for pair in pairs for x in pair))
        ),
        st.tuples(inner, inner, inner).map(lambda t: agg(b"|", t[0], t[1]) + not_push(t[2])),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(RESP_VALUE, st.booleans()), min_size=1, max_size=6),
    st.lists(st.integers(0, 5_000), max_size=20),
)
def test_random_replies_pair_one_per_command_whatever_the_split(
    values: list[tuple[bytes, bool]], cuts: list[int]
) -> None:
    # Each reply follows a push, and errors are mixed in by the flag.
    replies = [line(b"-", "ERR x") if failed else not_push(v) for v, failed in values]
    wire = b"".join(INVALIDATE + r for r in replies)
    requests = b"".join(cmd("GET", str(i)) for i in range(len(replies)))
    parser = RedisParser()
    parser.feed(REQUEST, requests, 1, 2)
    spans = [s for a, b in pieces(wire, cuts) for s in parser.feed(RESPONSE, wire[a:b], 3, 4)]
    assert parser.error == ""
    assert [s.status for s in spans] == ["error" if f else "ok" for _, f in values]
    assert [s.response_bytes for s in spans] == [len(r) for r in replies]
    assert parser.counters.get(PUSH_MESSAGES) == len(replies)


# -- close ----------------------------------------------------------------------------------


def test_close_gives_waiting_commands_as_incomplete_and_ends_the_parser() -> None:
    parser = RedisParser()
    parser.feed(REQUEST, cmd("BLPOP", "q", "0") + cmd("GET", "k"), 10, 20)
    assert parser.feed(RESPONSE, b"*2\r\n$1\r\nq", 30, 40) == []  # half a reply
    spans = parser.close(1_000)
    assert [(s.name, s.status, s.start_ns, s.end_ns) for s in spans] == [
        ("BLPOP", "incomplete", 10, 1_000),
        ("GET", "incomplete", 10, 1_000),
    ]
    assert names.ATTR_ERROR_MESSAGE not in attrs(spans[0])
    assert parser.buffered_bytes() == 0 and parser.pending_commands() == 0
    assert parser.feed(RESPONSE, b"\r\n$1\r\nx\r\n", 50, 60) == [] and parser.close(2_000) == []


# -- recognise ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        cmd("PING"),
        cmd("HELLO", "3", "AUTH", "u", "p"),
        cmd("AUTH", "pw")[:8],  # the first record may hold part of the command only
        b"PING\r\n",
        b"hello 3\r\n",
        b"AUTH secret\n",
    ],
)
def test_recognise_takes_each_kind_of_first_command(first: bytes) -> None:
    assert recognise(first)


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"*",
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # the HTTP/2 preface
        b"PING / HTTP/1.1\r\n",
        b"\x16\x03\x01",  # a TLS ClientHello
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"get key\r\n",  # memcached
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",  # PostgreSQL SSLRequest
        b"\x00\x00\x00\x29\x00\x03\x00\x00user\x00app\x00",  # PostgreSQL startup
        b"\x00\x00\x00\x1f\x00\x12\x00\x03\x00\x00\x00\x01",  # Kafka ApiVersions
        b"*\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00",  # a DNS query whose id is '*'
        b"\x00\x1d*1\x01\x00\x00\x01",  # DNS over TCP
        b"\x2a\x00\x00\x01\x85\xa6\xff\x01",  # a MySQL handshake response of 42 bytes
    ],
)
def test_recognise_refuses_other_protocols(first: bytes) -> None:
    assert not recognise(first)
