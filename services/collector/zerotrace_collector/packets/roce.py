"""RoCEv2 headers (pure): the Base Transport Header (BTH) at the start of a UDP datagram to port
4791, the extended headers that follow it, and the ACK Extended Transport Header (AETH).

One layout module: the opcode table, header lengths and syndrome names live here and nowhere
else (roce_flows.py reads them from here). Layout from the InfiniBand Architecture
Specification vol. 1 (chapter 9) and its RoCEv2 annex A17:

    BTH  12 bytes  opcode(8) | SE(1) M(1) PadCnt(2) TVer(4) | P_Key(16)
                   FECN(1) BECN(1) resv(6) | DestQP(24) | AckReq(1) resv(7) | PSN(24)
    ...  extended headers by opcode: RDETH 4 + DETH 8 (RD), DETH 8 (UD), RETH 16 (RDMA
         WRITE first/only, READ request), AtomicETH 28, AETH 4, AtomicAckETH 8, ImmDt 4, IETH 4
    ...  payload, then PadCnt pad bytes, then the 4-byte invariant CRC (ICRC)

A datagram whose captured bytes are too short for its headers is malformed (None); an opcode
this table does not know is kept, with unknown header length (its payload is not measured).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

ROCEV2_PORT = 4791  # IANA, the destination port of every RoCEv2 packet
BTH_BYTES = 12
ICRC_BYTES = 4
AETH_BYTES = 4
RETH_BYTES = 16
PSN_MODULO = 1 << 24

# Transport (top three bits of the opcode) and operation (low five).
RC, UC, RD, UD = 0x00, 0x20, 0x40, 0x60
CNP = 0x81  # Congestion Notification Packet (RoCEv2 annex A17.9.2): BTH + 16 reserved bytes

SEND_FIRST = 0x00
SEND_MIDDLE = 0x01
SEND_LAST = 0x02
SEND_LAST_IMM = 0x03
SEND_ONLY = 0x04
SEND_ONLY_IMM = 0x05
WRITE_FIRST = 0x06
WRITE_MIDDLE = 0x07
WRITE_LAST = 0x08
WRITE_LAST_IMM = 0x09
WRITE_ONLY = 0x0A
WRITE_ONLY_IMM = 0x0B
READ_REQUEST = 0x0C
READ_RESPONSE_FIRST = 0x0D
READ_RESPONSE_MIDDLE = 0x0E
READ_RESPONSE_LAST = 0x0F
READ_RESPONSE_ONLY = 0x10
ACKNOWLEDGE = 0x11
ATOMIC_ACKNOWLEDGE = 0x12
COMPARE_SWAP = 0x13
FETCH_ADD = 0x14
SEND_LAST_INVALIDATE = 0x16
SEND_ONLY_INVALIDATE = 0x17

# Extended header bytes after the BTH, by operation, for RC and UC (UC has no READ, ATOMIC
# or ACK opcodes; RD adds RDETH and DETH in front, UD carries only SEND ONLY with a DETH).
_EXT_BYTES: dict[int, int] = {
    SEND_FIRST: 0,
    SEND_MIDDLE: 0,
    SEND_LAST: 0,
    SEND_LAST_IMM: 4,
    SEND_ONLY: 0,
    SEND_ONLY_IMM: 4,
    WRITE_FIRST: RETH_BYTES,
    WRITE_MIDDLE: 0,
    WRITE_LAST: 0,
    WRITE_LAST_IMM: 4,
    WRITE_ONLY: RETH_BYTES,
    WRITE_ONLY_IMM: RETH_BYTES + 4,
    READ_REQUEST: RETH_BYTES,
    READ_RESPONSE_FIRST: AETH_BYTES,
    READ_RESPONSE_MIDDLE: 0,
    READ_RESPONSE_LAST: AETH_BYTES,
    READ_RESPONSE_ONLY: AETH_BYTES,
    ACKNOWLEDGE: AETH_BYTES,
    ATOMIC_ACKNOWLEDGE: AETH_BYTES + 8,
    COMPARE_SWAP: 28,
    FETCH_ADD: 28,
    SEND_LAST_INVALIDATE: 4,
    SEND_ONLY_INVALIDATE: 4,
}
_UC_OPERATIONS = frozenset(range(SEND_FIRST, WRITE_ONLY_IMM + 1))
_UD_OPERATIONS = frozenset((SEND_ONLY, SEND_ONLY_IMM))
_RDETH_DETH = 12
_DETH = 8
_CNP_BYTES = 16

# Operations that answer a request (sent by the responder); every other known one is a request.
RESPONSES = frozenset(
    (
        READ_RESPONSE_FIRST,
        READ_RESPONSE_MIDDLE,
        READ_RESPONSE_LAST,
        READ_RESPONSE_ONLY,
        ACKNOWLEDGE,
        ATOMIC_ACKNOWLEDGE,
    )
)
_WITH_AETH = RESPONSES - {READ_RESPONSE_MIDDLE}
_WITH_RETH = frozenset((WRITE_FIRST, WRITE_ONLY, WRITE_ONLY_IMM, READ_REQUEST))
# The responder answers these whatever their AckReq bit says.
ALWAYS_ANSWERED = frozenset((READ_REQUEST, COMPARE_SWAP, FETCH_ADD))
# A packet of these is exactly one path MTU of payload (IBA 9.7.7): how the MTU is learnt.
FULL_MTU = frozenset((SEND_FIRST, SEND_MIDDLE, WRITE_FIRST, WRITE_MIDDLE))
FULL_MTU_RESPONSES = frozenset((READ_RESPONSE_FIRST, READ_RESPONSE_MIDDLE))


class Transport(enum.StrEnum):
    RC = "RC"  # reliable connection: PSNs, ACKs, retransmission
    UC = "UC"  # unreliable connection: PSNs, no ACKs
    RD = "RD"
    UD = "UD"  # datagrams: one QP talks to many, PSNs are not per peer
    CNP = "CNP"
    OTHER = "OTHER"


class AckKind(enum.StrEnum):
    """The AETH syndrome's top bits (IBA 9.7.5.1.4): 00 ACK, 01 RNR NAK, 11 NAK."""

    ACK = "ack"
    RNR_NAK = "rnr_nak"
    NAK = "nak"
    RESERVED = "reserved"


# NAK codes (the syndrome's low five bits when its top bits are 11), as counter names.
NAK_CODES = {
    0: "nak_psn_sequence_error",
    1: "nak_invalid_request",
    2: "nak_remote_access_error",
    3: "nak_remote_operational_error",
    4: "nak_invalid_rd_request",
}
RNR_NAK = "rnr_nak"


@dataclass(frozen=True, slots=True)
class Aeth:
    syndrome: int
    msn: int

    @property
    def kind(self) -> AckKind:
        return (AckKind.ACK, AckKind.RNR_NAK, AckKind.RESERVED, AckKind.NAK)[
            (self.syndrome >> 5) & 0x3
        ]

    @property
    def counter(self) -> str | None:
        """The counter a NAK adds to (RNR_NAK or a NAK_CODES name); None for an ACK."""
        kind = self.kind
        if kind is AckKind.RNR_NAK:
            return RNR_NAK
        if kind is AckKind.NAK:
            return NAK_CODES.get(self.syndrome & 0x1F, f"nak_code_{self.syndrome & 0x1F}")
        return None


@dataclass(frozen=True, slots=True)
class RocePacket:
    opcode: int
    transport: Transport
    operation: int  # low five bits for RC, UC, RD, UD; the opcode itself otherwise
    dest_qp: int
    psn: int
    ack_req: bool
    fecn: bool
    becn: bool
    pad: int
    aeth: Aeth | None
    dma_length: int | None  # RETH's length: bytes a READ request asks for, or a WRITE carries
    payload_bytes: int | None  # data bytes (headers, pad and ICRC taken off); None if unknown

    @property
    def is_response(self) -> bool:
        return self.transport in (Transport.RC, Transport.RD) and self.operation in RESPONSES

    @property
    def is_request(self) -> bool:
        return self.transport in (Transport.RC, Transport.UC) and not self.is_response


def transport_of(opcode: int) -> tuple[Transport, int]:
    if opcode == CNP:
        return Transport.CNP, opcode
    operation = opcode & 0x1F
    kind = opcode & 0xE0
    if kind == RC and operation in _EXT_BYTES:
        return Transport.RC, operation
    if kind == UC and operation in _UC_OPERATIONS:
        return Transport.UC, operation
    if kind == RD and operation in _EXT_BYTES and operation < SEND_LAST_INVALIDATE:
        return Transport.RD, operation
    if kind == UD and operation in _UD_OPERATIONS:
        return Transport.UD, operation
    return Transport.OTHER, opcode


def header_bytes(transport: Transport, operation: int) -> int | None:
    """BTH plus extended headers; None for an opcode whose layout is not known here."""
    if transport is Transport.CNP:
        return BTH_BYTES + _CNP_BYTES
    if transport is Transport.OTHER:
        return None
    extra = {Transport.RD: _RDETH_DETH, Transport.UD: _DETH}.get(transport, 0)
    return BTH_BYTES + extra + _EXT_BYTES[operation]


def parse_roce(data: bytes, size: int | None = None) -> RocePacket | None:
    """The RoCEv2 headers of a UDP payload (`data`: the captured bytes; `size`: the payload's
    length as the UDP header says, when the capture cut it). None when the captured bytes
    are too short for the BTH and the extended headers this code reads (AETH, RETH)."""
    if len(data) < BTH_BYTES:
        return None
    size = len(data) if size is None else size
    opcode, flags, _pkey, fb, qp_hi, qp_lo, ab, psn_hi, psn_lo = struct.unpack_from(
        "!BBHBBHBBH", data
    )
    transport, operation = transport_of(opcode)
    headers = header_bytes(transport, operation)
    pad = (flags >> 4) & 0x3
    after_bth = BTH_BYTES + {Transport.RD: _RDETH_DETH, Transport.UD: _DETH}.get(transport, 0)
    aeth: Aeth | None = None
    dma_length: int | None = None
    if transport in (Transport.RC, Transport.RD) and operation in _WITH_AETH:
        if len(data) < after_bth + AETH_BYTES:
            return None
        syndrome, msn_hi, msn_lo = struct.unpack_from("!BBH", data, after_bth)
        aeth = Aeth(syndrome, (msn_hi << 16) | msn_lo)
    if transport in (Transport.RC, Transport.UC, Transport.RD) and operation in _WITH_RETH:
        if len(data) < after_bth + RETH_BYTES:
            return None
        (dma_length,) = struct.unpack_from("!I", data, after_bth + 12)  # after VA and R_Key
    payload = None
    if headers is not None:
        payload = size - headers - pad - ICRC_BYTES
        if payload < 0:
            return None
    return RocePacket(
        opcode=opcode,
        transport=transport,
        operation=operation,
        dest_qp=(qp_hi << 16) | qp_lo,
        psn=(psn_hi << 16) | psn_lo,
        ack_req=bool(ab & 0x80),
        fecn=bool(fb & 0x80),
        becn=bool(fb & 0x40),
        pad=pad,
        aeth=aeth,
        dma_length=dma_length,
        payload_bytes=payload,
    )
