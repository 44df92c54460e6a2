"""One DNS message on the wire (RFC 1035 section 4), decoded into what a span reports. Pure.

`decode` reads the header, the first question, the answer section's addresses and CNAME
targets, and an EDNS OPT record's extended response code (RFC 6891); every other record is
stepped over by its length, never interpreted. `looks_like_query` judges the start of a
connection's first message. Names come out in presentation form (RFC 1035 section 5.1: a
label's dot, backslash and quote escaped, other non-printable bytes as \\DDD): the name as
queried, which OpenTelemetry's `dns.question.name` asks for, in the escaping its earlier
versions spelled out, so a binary label cannot forge a dot or a control character.

`decode` never raises on input: a message whose header or question cannot be read gives the
reason as a string; a record that cannot be read ends the walk and is flagged, keeping what
came before. Work is bounded by the message's length and by the name limits below, whatever
the counts in the header claim.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass

HEADER_BYTES = 12
# RFC 1035 section 2.3.4: a name is at most 255 octets on the wire, a label at most 63 (the
# two top bits of a length byte mark a compression pointer, so 63 is also all it can say).
MAX_NAME_WIRE_BYTES = 255
# A name of 255 octets has at most 127 labels, so a compressor never needs more jumps than
# that; a hostile chain of pointers (each 2 bytes, each strictly backward) stops here.
MAX_POINTER_JUMPS = 127
# Answers kept as text on a span. A resolver's answer is a CNAME chain and a handful of
# addresses (a big CDN name: 2-3 CNAMEs and 4-8 addresses); past 16 the list says no more,
# and the answer count still tells how many there were.
MAX_ANSWERS_KEPT = 16

TYPE_A, TYPE_CNAME, TYPE_AAAA, TYPE_OPT = 1, 5, 28, 41
OPCODE_QUERY, OPCODE_NOTIFY, OPCODE_UPDATE = 0, 4, 5
RCODE_NOERROR = 0
# The classes a query is asked in (RFC 1035 IN, CH, HS; RFC 2136 NONE; ANY): anything else
# in a first message means it is not DNS.
_QUERY_CLASSES = frozenset((1, 3, 4, 254, 255))

# IANA "Resource Record (RR) TYPEs", the ones seen in practice; others print as TYPEnnn.
_TYPES = {
    1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 13: "HINFO", 15: "MX", 16: "TXT",
    17: "RP", 18: "AFSDB", 24: "SIG", 25: "KEY", 28: "AAAA", 29: "LOC", 33: "SRV",
    35: "NAPTR", 36: "KX", 37: "CERT", 39: "DNAME", 41: "OPT", 42: "APL", 43: "DS",
    44: "SSHFP", 45: "IPSECKEY", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 49: "DHCID",
    50: "NSEC3", 51: "NSEC3PARAM", 52: "TLSA", 53: "SMIMEA", 55: "HIP", 59: "CDS",
    60: "CDNSKEY", 61: "OPENPGPKEY", 62: "CSYNC", 63: "ZONEMD", 64: "SVCB", 65: "HTTPS",
    99: "SPF", 108: "EUI48", 109: "EUI64", 249: "TKEY", 250: "TSIG", 251: "IXFR",
    252: "AXFR", 255: "ANY", 256: "URI", 257: "CAA",
}  # fmt: skip
# IANA "DNS RCODEs" a message header or OPT record carries (16-22 but BADVERS are TSIG's).
_RCODES = {
    0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
    6: "YXDOMAIN", 7: "YXRRSET", 8: "NXRRSET", 9: "NOTAUTH", 10: "NOTZONE", 11: "DSOTYPENI",
    16: "BADVERS", 23: "BADCOOKIE",
}  # fmt: skip
_HEADER = struct.Struct("!6H")  # id, flags, question, answer, authority, additional counts
_RECORD = struct.Struct("!HHIH")  # after a record's name: type, class, TTL, data length
_U16 = struct.Struct("!H")
_OPCODES = {0: "QUERY", 1: "IQUERY", 2: "STATUS", 4: "NOTIFY", 5: "UPDATE", 6: "DSO"}

# Bytes a label cannot show as they are: non-printables, and the three that mean something
# in presentation form.
_NEEDS_ESCAPE = re.compile(rb'[^\x21-\x7e]|[."\\]')
_ESCAPED = [
    f"\\{chr(b)}" if b in b'."\\' else chr(b) if 0x21 <= b <= 0x7E else f"\\{b:03d}"
    for b in range(256)
]


def type_name(qtype: int) -> str:
    """RFC 3597's TYPEnnn for types without a mnemonic: the attribute stays one string type."""
    return _TYPES.get(qtype) or f"TYPE{qtype}"


def rcode_name(rcode: int) -> str:
    return _RCODES.get(rcode) or f"RCODE{rcode}"


def opcode_name(opcode: int) -> str:
    return _OPCODES.get(opcode) or f"OPCODE{opcode}"


class Malformed(ValueError):
    """Bytes that cannot be read as what was expected there. Only `read_name` lets it out;
    `decode` and `looks_like_query` turn it into a reason or a verdict."""


@dataclass(slots=True)
class Message:
    id: int
    is_response: bool
    opcode: int
    truncated: bool  # TC: the answer did not fit (UDP); the client retries over TCP
    rcode: int  # with the EDNS extension when an OPT record carried one
    question_name: str | None  # None: no question (an empty FORMERR, a DSO message)
    question_type: int
    answer_count: int  # as the header says
    answers: tuple[str, ...]  # A/AAAA addresses and CNAME targets, MAX_ANSWERS_KEPT at most
    answers_capped: bool = False  # more of those than MAX_ANSWERS_KEPT
    records_malformed: bool = False  # a record could not be read: the walk stopped there


def decode(buf: bytes, complete: bool = True) -> Message | str:
    """One message. `complete` is False when `buf` is only the message's start (the caller
    kept a prefix of a long one): records running past the end are then not malformed."""
    if len(buf) < HEADER_BYTES:
        return f"message shorter than a DNS header ({len(buf)} bytes)"
    ident, flags, qdcount, ancount, nscount, arcount = _HEADER.unpack_from(buf)
    name, qtype, pos = None, 0, HEADER_BYTES
    try:
        for index in range(qdcount):  # bounded by the message: a question takes 5 bytes
            if index == 0:
                name, pos = read_name(buf, pos)
            else:
                pos = _skip_name(buf, pos)
            if pos + 4 > len(buf):
                raise Malformed("question runs past the message")
            if index == 0:
                qtype = _U16.unpack_from(buf, pos)[0]
            pos += 4
    except Malformed as err:
        return f"malformed question: {err}"
    message = Message(
        id=ident,
        is_response=bool(flags & 0x8000),
        opcode=(flags >> 11) & 0xF,
        truncated=bool(flags & 0x0200),
        rcode=flags & 0xF,
        question_name=name,
        question_type=qtype,
        answer_count=ancount,
        answers=(),
    )
    try:
        _walk_records(buf, pos, (ancount, nscount, arcount), message)
    except Malformed:
        message.records_malformed = complete
    return message


def _walk_records(buf: bytes, pos: int, counts: tuple[int, int, int], message: Message) -> None:
    """Steps over the records; keeps the answers' addresses and CNAME targets and an OPT
    record's extended rcode. Without additional records the walk stops after the answers."""
    ancount, nscount, arcount = counts
    answers: list[str] = []
    try:
        for index in range(ancount + nscount + arcount if arcount else ancount):
            # Bounded by the message however large the counts: a record takes 11 bytes.
            head = _skip_name(buf, pos)
            rdata = head + 10
            if rdata > len(buf):
                raise Malformed("record runs past the message")
            rtype, _, ttl, rdlength = _RECORD.unpack_from(buf, head)
            pos = rdata + rdlength
            if pos > len(buf):
                raise Malformed("record data runs past the message")
            if index < ancount and rtype in (TYPE_A, TYPE_AAAA, TYPE_CNAME):
                if len(answers) == MAX_ANSWERS_KEPT:
                    message.answers_capped = True
                elif rtype == TYPE_A and pos - rdata == 4:
                    answers.append(".".join(map(str, buf[rdata:pos])))
                elif rtype == TYPE_AAAA and pos - rdata == 16:
                    answers.append(ipaddress.IPv6Address(bytes(buf[rdata:pos])).compressed)
                elif rtype == TYPE_CNAME:
                    answers.append(read_name(buf, rdata)[0])
            elif rtype == TYPE_OPT and index >= ancount + nscount:
                # The TTL field's top byte holds the rcode's upper 8 bits (RFC 6891 6.1.3).
                message.rcode |= (ttl >> 24) << 4
    finally:
        message.answers = tuple(answers)


def read_name(buf: bytes, pos: int) -> tuple[str, int]:
    """The name at `pos` in presentation form, and the position after it where it sits.
    Compression pointers are followed only backward, each before the label sequence that
    holds it (a name can only refer to one written earlier), so every chain ends; never into
    the header, and at most MAX_POINTER_JUMPS of them. Raises Malformed with the reason."""
    labels: list[bytes] = []
    after = -1
    limit = pos  # a pointer must target an offset below the sequence it is read in
    wire = 1  # the root's zero byte
    jumps = 0
    while True:
        if pos >= len(buf):
            raise Malformed("name runs past the message")
        size = buf[pos]
        if size == 0:
            break
        if size >= 0xC0:
            if pos + 1 >= len(buf):
                raise Malformed("name runs past the message")
            target = ((size & 0x3F) << 8) | buf[pos + 1]
            if after < 0:
                after = pos + 2
            if not HEADER_BYTES <= target < limit:
                raise Malformed("compression pointer not to an earlier name")
            jumps += 1
            if jumps > MAX_POINTER_JUMPS:
                raise Malformed("too many compression pointers")
            pos = limit = target
            continue
        if size > 0x3F:
            raise Malformed("reserved label type")
        wire += size + 1
        if wire > MAX_NAME_WIRE_BYTES:
            raise Malformed("name longer than 255 bytes")
        label = buf[pos + 1 : pos + 1 + size]
        if len(label) < size:
            raise Malformed("name runs past the message")
        labels.append(label)
        pos += 1 + size
    return _presentation(labels), (pos + 1 if after < 0 else after)


def _presentation(labels: list[bytes]) -> str:
    if not labels:
        return "."
    if _NEEDS_ESCAPE.search(b"".join(labels)) is None:  # one search per name: nearly always
        return b".".join(labels).decode("ascii")
    return ".".join("".join([_ESCAPED[b] for b in label]) for label in labels)


def _skip_name(buf: bytes, pos: int) -> int:
    """The position after the name at `pos`, without following its pointer: a record's
    owner name is not reported, so it costs only its own labels."""
    start = pos
    while pos < len(buf):
        size = buf[pos]
        if size == 0:
            return pos + 1
        if size >= 0xC0:
            return pos + 2
        if size > 0x3F or pos + 1 + size - start > MAX_NAME_WIRE_BYTES:
            raise Malformed("malformed name")
        pos += 1 + size
    raise Malformed("name runs past the message")


def looks_like_query(buf: bytes) -> bool:
    """Does `buf` start like a client's query (QUERY, NOTIFY or UPDATE)? QR, AA, TC, RA and
    the rcode clear, one question whose name reads and whose class is a real one; a QUERY
    carries no answer or authority records and at most an OPT, a cookie and a TSIG record."""
    if len(buf) < HEADER_BYTES + 5 or buf[2] & 0x86 or buf[3] & 0xCF:
        return False
    opcode = (buf[2] >> 3) & 0xF
    if opcode not in (OPCODE_QUERY, OPCODE_NOTIFY, OPCODE_UPDATE) or buf[4:6] != b"\0\1":
        return False
    if opcode == OPCODE_QUERY and (buf[6:10] != b"\0\0\0\0" or buf[10] or buf[11] > 3):
        return False
    try:
        pos = read_name(buf, HEADER_BYTES)[1]
    except Malformed:
        return False
    return len(buf) >= pos + 4 and _U16.unpack_from(buf, pos + 2)[0] in _QUERY_CLASSES
