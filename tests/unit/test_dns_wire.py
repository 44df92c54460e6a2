"""dns_wire.py: one DNS message decoded (RFC 1035 section 4). The messages are built here byte
by byte from the RFC's layout (the builders below, which test_dns.py uses too), so a test
reads like the message it sends."""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator import dns_wire
from zerotrace_correlator.dns_wire import MAX_ANSWERS_KEPT, Message, decode, read_name

pytestmark = pytest.mark.unit

A, NS, CNAME, PTR, TXT, AAAA, SRV, OPT, HTTPS = 1, 2, 5, 12, 16, 28, 33, 41, 65
QR, TC, RD, RA = 0x8000, 0x0200, 0x0100, 0x0080
TO_QUESTION = b"\xc0\x0c"  # a compression pointer to the question's name, right after the header

# --- builders (RFC 1035 4.1) ---------------------------------------------------------------


def name(text: str) -> bytes:
    """Uncompressed wire form of a dotted name; "." is the root."""
    labels = [label.encode() for label in text.split(".") if label]
    return b"".join(bytes([len(label)]) + label for label in labels) + b"\0"


def header(ident: int, flags: int, qd: int = 1, an: int = 0, ns: int = 0, ar: int = 0) -> bytes:
    return struct.pack("!6H", ident, flags, qd, an, ns, ar)


def rr(owner: bytes, rtype: int, rdata: bytes, ttl: int = 300, rclass: int = 1) -> bytes:
    return owner + struct.pack("!HHIH", rtype, rclass, ttl, len(rdata)) + rdata


def opt(ext_rcode: int = 0, udp_size: int = 1232) -> bytes:
    """An EDNS OPT pseudo-record (RFC 6891): class is the UDP size, the TTL's top byte the
    upper bits of the rcode."""
    return rr(b"\0", OPT, b"", ttl=ext_rcode << 24, rclass=udp_size)


def query(ident: int, qname: str, qtype: int = A, *, opcode: int = 0, edns: bool = False) -> bytes:
    flags = opcode << 11 | (RD if opcode == 0 else 0)
    extra = opt() if edns else b""
    return header(ident, flags, ar=int(edns)) + name(qname) + struct.pack("!HH", qtype, 1) + extra


def response(
    ident: int,
    qname: str | None,
    qtype: int = A,
    answers: Sequence[bytes] = (),
    *,
    rcode: int = 0,
    tc: bool = False,
    opcode: int = 0,
    authority: Sequence[bytes] = (),
    additional: Sequence[bytes] = (),
) -> bytes:
    flags = QR | opcode << 11 | RD | RA | (TC if tc else 0) | rcode & 0xF
    counts = (qname is not None, len(answers), len(authority), len(additional))
    body = b"" if qname is None else name(qname) + struct.pack("!HH", qtype, 1)
    return header(ident, flags, *counts) + body + b"".join((*answers, *authority, *additional))


def a_record(address: str, owner: bytes = TO_QUESTION) -> bytes:
    return rr(owner, A, bytes(int(part) for part in address.split(".")))


def tcp(*messages: bytes) -> bytes:
    """RFC 1035 4.2.2: over TCP each message follows its length in two bytes."""
    return b"".join(struct.pack("!H", len(m)) + m for m in messages)


# --- names ---------------------------------------------------------------------------------


def test_a_plain_name_reads_in_presentation_form_with_its_end() -> None:
    wire = header(1, 0) + name("www.Example.com") + b"rest"
    assert read_name(wire, 12) == ("www.Example.com", len(wire) - 4)
    assert read_name(header(1, 0) + b"\0", 12) == (".", 13)


def test_odd_bytes_in_a_label_are_escaped() -> None:
    label = b'a.b\\c"d e\x00\xff'
    wire = header(1, 0) + bytes([len(label)]) + label + b"\3com\0"
    assert read_name(wire, 12)[0] == 'a\\.b\\\\c\\"d\\032e\\000\\255.com'


def test_a_compression_pointer_is_followed_and_the_name_ends_at_the_pointer() -> None:
    first = header(1, 0) + name("example.com")  # at 12
    second = b"\3www" + TO_QUESTION  # www + pointer to example.com
    wire = first + second
    assert read_name(wire, len(first)) == ("www.example.com", len(wire))
    chained = wire + b"\2m1" + struct.pack("!H", 0xC000 | len(first))
    assert read_name(chained, len(wire)) == ("m1.www.example.com", len(chained))


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (header(1, 0) + b"\xc0\x0c", "compression pointer not to an earlier name"),  # itself
        (header(1, 0) + b"\1a\xc0\x10\0", "compression pointer not to an earlier name"),  # ahead
        (header(1, 0) + b"\xc0\x02", "compression pointer not to an earlier name"),  # header
        (header(1, 0) + b"\1a\xc0", "name runs past the message"),
        (header(1, 0) + b"\5ab", "name runs past the message"),
        (header(1, 0) + b"\1a", "name runs past the message"),
        (header(1, 0) + b"\x41a\0", "reserved label type"),  # 0x40: the dead EDNS bit labels
        (header(1, 0) + b"\x81a\0", "reserved label type"),
        (header(1, 0) + (b"\x3f" + b"a" * 63) * 5, "name longer than 255 bytes"),
    ],
)
def test_hostile_names_are_refused_with_a_reason(wire: bytes, reason: str) -> None:
    with pytest.raises(dns_wire.Malformed, match=reason):
        read_name(wire, 12)


def test_two_pointers_pointing_at_each_other_do_not_loop() -> None:
    # At 12: "a" then a pointer to 16; at 16: "b" then a pointer back to 12.
    wire = header(1, 0) + b"\1a\xc0\x10" + b"\1b\xc0\x0c"
    with pytest.raises(dns_wire.Malformed, match="not to an earlier name"):
        read_name(wire, 16)


def test_a_long_chain_of_backward_pointers_stops_at_the_jump_cap() -> None:
    wire = bytearray(header(1, 0) + b"\0")  # the root at 12
    for _ in range(dns_wire.MAX_POINTER_JUMPS + 1):  # each pointer to the previous one
        wire += struct.pack("!H", 0xC000 | (len(wire) - 2 if len(wire) > 13 else 12))
    assert read_name(bytes(wire), 13 + 2 * (dns_wire.MAX_POINTER_JUMPS - 1)) == (".", len(wire) - 2)
    with pytest.raises(dns_wire.Malformed, match="too many compression pointers"):
        read_name(bytes(wire), len(wire) - 2)


# --- messages ------------------------------------------------------------------------------


def test_a_query_decodes() -> None:
    message = decode(query(0xBEEF, "example.com", AAAA, edns=True))
    assert message == Message(
        id=0xBEEF, is_response=False, opcode=0, truncated=False, rcode=0,
        question_name="example.com", question_type=AAAA, answer_count=0, answers=(),
    )  # fmt: skip


def test_a_response_keeps_addresses_and_cname_targets_in_order() -> None:
    answers = [
        rr(TO_QUESTION, CNAME, b"\3cdn" + TO_QUESTION),  # cdn.example.com, compressed
        rr(b"\3cdn" + TO_QUESTION, A, bytes([192, 0, 2, 1])),
        rr(TO_QUESTION, AAAA, bytes.fromhex("20010db8000000000000000000000001")),
        rr(TO_QUESTION, TXT, b"\5hello"),  # not an address: counted, not listed
    ]
    message = decode(response(7, "example.com", A, answers, authority=[rr(b"\0", NS, b"\0")]))
    assert isinstance(message, Message)
    assert message.is_response and message.rcode == 0 and message.answer_count == 4
    assert message.answers == ("cdn.example.com", "192.0.2.1", "2001:db8::1")
    assert not message.answers_capped and not message.records_malformed


def test_answers_past_the_cap_are_counted_not_kept() -> None:
    answers = [a_record(f"10.0.0.{i}") for i in range(MAX_ANSWERS_KEPT + 4)]
    message = decode(response(7, "big.example", A, answers))
    assert isinstance(message, Message)
    assert message.answer_count == MAX_ANSWERS_KEPT + 4
    assert len(message.answers) == MAX_ANSWERS_KEPT and message.answers_capped


def test_an_opt_record_extends_the_response_code() -> None:
    message = decode(response(7, "example.com", A, rcode=0, additional=[opt(ext_rcode=1)]))
    assert isinstance(message, Message) and message.rcode == 16  # BADVERS (RFC 6891)
    assert dns_wire.rcode_name(message.rcode) == "BADVERS"


def test_a_broken_record_keeps_what_came_before_and_is_flagged_only_in_a_whole_message() -> None:
    wire = response(7, "example.com", A, [a_record("192.0.2.1"), a_record("192.0.2.2")])[:-2]
    whole, prefix = decode(wire), decode(wire, complete=False)
    assert isinstance(whole, Message) and isinstance(prefix, Message)
    assert whole.answers == prefix.answers == ("192.0.2.1",)
    assert whole.records_malformed and not prefix.records_malformed


def test_a_message_too_short_or_with_a_broken_question_gives_a_reason() -> None:
    assert decode(b"\0" * 11) == "message shorter than a DNS header (11 bytes)"
    assert decode(header(1, 0) + b"\3www") == "malformed question: name runs past the message"
    assert decode(header(1, 0) + name("a.b") + b"\0") == (
        "malformed question: question runs past the message"
    )


def test_counts_the_header_lies_about_cost_no_more_than_the_bytes() -> None:
    hostile = header(1, QR, qd=1, an=0xFFFF, ns=0xFFFF, ar=0xFFFF) + name("a") + b"\0\1\0\1"
    began = time.perf_counter()
    message = decode(hostile + a_record("192.0.2.1") * 300)
    assert time.perf_counter() - began < 0.5
    assert isinstance(message, Message) and message.records_malformed
    assert decode(header(1, 0, qd=0xFFFF) + name("a") + b"\0\1\0\1") == (
        "malformed question: name runs past the message"
    )


def test_type_response_code_and_opcode_names() -> None:
    assert [dns_wire.type_name(t) for t in (A, AAAA, CNAME, PTR, SRV, TXT, HTTPS)] == [
        "A", "AAAA", "CNAME", "PTR", "SRV", "TXT", "HTTPS",
    ]  # fmt: skip
    assert dns_wire.type_name(65280) == "TYPE65280"  # RFC 3597 for a type without a name
    assert [dns_wire.rcode_name(r) for r in (0, 2, 3, 5, 12)] == [
        "NOERROR", "SERVFAIL", "NXDOMAIN", "REFUSED", "RCODE12",
    ]  # fmt: skip
    assert dns_wire.opcode_name(4) == "NOTIFY" and dns_wire.opcode_name(9) == "OPCODE9"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600), st.booleans())
def test_any_bytes_decode_or_give_a_reason(wire: bytes, complete: bool) -> None:
    result = decode(wire, complete)
    assert isinstance(result, str) or len(result.answers) <= MAX_ANSWERS_KEPT


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=13, max_size=300), st.integers(0, 300))
def test_flipped_bytes_in_a_real_response_never_raise(noise: bytes, at: int) -> None:
    wire = bytearray(response(9, "a.example", A, [a_record("192.0.2.1")] * 3))
    at %= len(wire)
    wire[at : at + len(noise)] = noise
    decode(bytes(wire))
    dns_wire.looks_like_query(bytes(wire))
