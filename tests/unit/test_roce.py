"""packets/roce.py: BTH, AETH, RETH and CNP as scapy's RoCE layers build them; every opcode
of scapy's table gets its transport, operation and header length; NAK syndromes get their
counter names; short or inconsistent datagrams are None."""

from __future__ import annotations

import struct

import pytest
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, _bth_opcodes, cnp
from scapy.packet import Raw

from zerotrace_collector.packets.roce import (
    ACKNOWLEDGE,
    BTH_BYTES,
    READ_REQUEST,
    AckKind,
    Aeth,
    Transport,
    header_bytes,
    parse_roce,
    transport_of,
)

pytestmark = pytest.mark.unit


def test_the_bth_fields() -> None:
    data = raw(
        BTH(opcode=0x04, dqpn=0xABCDEF, psn=0xFFFFFF, ackreq=1, fecn=1, becn=0, padcount=0)
        / Raw(bytes(8))
    )
    got = parse_roce(data)
    assert got is not None
    assert (got.transport, got.operation) == (Transport.RC, 4)
    assert (got.dest_qp, got.psn, got.payload_bytes) == (0xABCDEF, 0xFFFFFF, 8)
    assert (got.ack_req, got.fecn, got.becn, got.pad) == (True, True, False, 0)
    assert (got.is_request, got.is_response, got.aeth) == (True, False, None)


@pytest.mark.parametrize("opcode", sorted(o for o in _bth_opcodes if o != 0x81))
def test_every_opcode_of_scapys_table_has_a_known_header_length(opcode: int) -> None:
    transport, operation = transport_of(opcode)
    assert transport.value == _bth_opcodes[opcode].split("_")[0]
    headers = header_bytes(transport, operation)
    assert headers is not None
    data = raw(BTH(opcode=opcode, dqpn=7, psn=9) / Raw(bytes(headers - BTH_BYTES) + bytes(40)))
    got = parse_roce(data)
    assert got is not None and got.payload_bytes == 40


@pytest.mark.parametrize(
    ("syndrome", "kind", "counter"),
    [
        (0x1F, AckKind.ACK, None),
        (0x00, AckKind.ACK, None),
        (0x2E, AckKind.RNR_NAK, "rnr_nak"),
        (0x60, AckKind.NAK, "nak_psn_sequence_error"),
        (0x61, AckKind.NAK, "nak_invalid_request"),
        (0x62, AckKind.NAK, "nak_remote_access_error"),
        (0x63, AckKind.NAK, "nak_remote_operational_error"),
        (0x64, AckKind.NAK, "nak_invalid_rd_request"),
        (0x69, AckKind.NAK, "nak_code_9"),
        (0x40, AckKind.RESERVED, None),
    ],
)
def test_aeth_syndromes(syndrome: int, kind: AckKind, counter: str | None) -> None:
    got = parse_roce(raw(BTH(opcode=ACKNOWLEDGE, psn=3) / AETH(syndrome=syndrome, msn=0x10203)))
    assert got is not None and got.aeth == Aeth(syndrome, 0x10203)
    assert (got.aeth.kind, got.aeth.counter, got.is_response) == (kind, counter, True)


def test_a_read_request_carries_its_length() -> None:
    reth = struct.pack("!QII", 0x1000, 0x77, 65536)
    got = parse_roce(raw(BTH(opcode=READ_REQUEST, psn=1) / Raw(reth)))
    assert got is not None and (got.dma_length, got.payload_bytes) == (65536, 0)


def test_a_cnp() -> None:
    got = parse_roce(raw(cnp(0x42)))
    assert got is not None
    assert (got.transport, got.dest_qp) == (Transport.CNP, 0x42)
    assert (got.becn, got.payload_bytes) == (True, 0)
    assert not got.is_request and not got.is_response


def test_pad_bytes_and_a_cut_capture() -> None:
    data = raw(BTH(opcode=0x04, padcount=3) / Raw(bytes(61) + bytes(3)))
    got = parse_roce(data)
    assert got is not None and got.pad == 3 and got.payload_bytes == 61
    cut = parse_roce(data[:20], size=len(data))  # the capture kept 20 bytes of the datagram
    assert cut is not None and cut.payload_bytes == 61


def test_unknown_opcodes_are_kept_without_a_length() -> None:
    got = parse_roce(raw(BTH(opcode=0x1F, dqpn=5) / Raw(bytes(20))))
    assert got is not None
    assert (got.transport, got.operation, got.payload_bytes) == (Transport.OTHER, 0x1F, None)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        bytes(11),
        raw(BTH(opcode=ACKNOWLEDGE))[:14],  # no room for the AETH
        raw(BTH(opcode=READ_REQUEST) / Raw(bytes(8))),  # RETH cut
        bytes([0x04]) + bytes(11),  # a SEND without room for its ICRC
    ],
)
def test_short_datagrams_are_none(data: bytes) -> None:
    assert parse_roce(data) is None
