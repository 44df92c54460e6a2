"""packets/bpf_filter.py: the classic BPF socket filter keeping UDP datagrams to one port, run
here by a small interpreter of the instructions it uses (the kernel's semantics from
linux/filter.h: a load past the frame's end drops it) over frames built with scapy. The same
program attached to a real socket is in tests/kernel/test_roce_live.py."""

from __future__ import annotations

import struct

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from zerotrace_collector.packets import bpf_filter as bpf
from zerotrace_collector.packets.bpf_filter import Instruction, pack, udp_port_filter

pytestmark = pytest.mark.unit

PORT = 4791
HOST, OUTGOING = 0, 4
SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"


def run(program: list[Instruction], frame: bytes, pkttype: int = HOST) -> int:
    """What the kernel keeps of the frame: 0 drops it."""
    a = x = pc = 0
    ancillary_pkttype = (bpf.SKF_AD_OFF + bpf.SKF_AD_PKTTYPE) & 0xFFFFFFFF

    def load(at: int, size: int) -> int | None:
        if at == ancillary_pkttype and size == 1:
            return pkttype
        if at + size > len(frame):
            return None
        return int.from_bytes(frame[at : at + size], "big")

    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == bpf.RET_K:
            return k
        if code in (bpf.LD_B_ABS, bpf.LD_H_ABS, bpf.LD_W_ABS, bpf.LD_H_IND):
            size = {bpf.LD_B_ABS: 1, bpf.LD_W_ABS: 4}.get(code, 2)
            value = load(k + (x if code == bpf.LD_H_IND else 0), size)
            if value is None:
                return 0
            a = value
        elif code == bpf.LDX_B_MSH:
            value = load(k, 1)
            if value is None:
                return 0
            x = 4 * (value & 0x0F)
        elif code == bpf.ALU_AND_K:
            a &= k
        elif code == bpf.JEQ_K:
            pc += jt if a == k else jf
        elif code == bpf.JSET_K:
            pc += jt if a & k else jf
        else:
            raise AssertionError(f"opcode {code:#x} not interpreted")


def ether(layer: Packet) -> bytes:
    return raw(Ether(src=SRC_MAC, dst=DST_MAC) / layer)


ETHERNET = udp_port_filter(PORT, 14, capture_bytes=128)
V4 = IP(src="10.0.0.1", dst="10.0.0.2")
V6 = IPv6(src="fd00::1", dst="fd00::2")
BODY = Raw(bytes(300))


@pytest.mark.parametrize(
    ("frame", "kept"),
    [
        (ether(V4 / UDP(sport=49152, dport=PORT) / BODY), 128),
        (ether(V6 / UDP(sport=49152, dport=PORT) / BODY), 128),
        (ether(IP(src="10.0.0.1", dst="10.0.0.2", options=b"\x01" * 8) / UDP(dport=PORT)), 128),
        (ether(V4 / UDP(sport=PORT, dport=4792) / BODY), 0),  # only the destination port
        (ether(V4 / TCP(sport=1, dport=PORT) / BODY), 0),
        (ether(V6 / TCP(sport=1, dport=PORT)), 0),
        (ether(V4 / UDP(sport=49152, dport=53)), 0),
        (ether(IP(src="10.0.0.1", dst="10.0.0.2", flags="MF") / UDP(dport=PORT) / BODY), 0),
        (ether(IP(src="10.0.0.1", dst="10.0.0.2", frag=3, proto=17) / BODY), 0),
        (ether(V6 / IPv6ExtHdrDestOpt() / UDP(dport=PORT)), 0),  # behind an extension header
        (raw(Ether(src=SRC_MAC, dst=DST_MAC, type=0x0806) / Raw(bytes(28))), 0),  # ARP
        (ether(V4 / UDP(dport=PORT))[:36], 0),  # cut before the UDP port: a load past the end
    ],
)
def test_ethernet_frames_kept_only_as_udp_to_the_port(frame: bytes, kept: int) -> None:
    assert run(ETHERNET, frame) == kept


def test_raw_ip_frames_are_read_from_offset_zero() -> None:
    program = udp_port_filter(PORT, 0)
    assert run(program, raw(V4 / UDP(dport=PORT))) == bpf.MAX_CAPTURE
    assert run(program, raw(V6 / UDP(dport=PORT))) == bpf.MAX_CAPTURE
    assert run(program, raw(V4 / UDP(dport=PORT + 1))) == 0
    assert run(program, b"\x50" + bytes(40)) == 0  # neither IPv4 nor IPv6


def test_loopback_keeps_only_the_arriving_copy() -> None:
    frame = ether(V4 / UDP(dport=PORT))
    loopback = udp_port_filter(PORT, 14, drop_outgoing=True)
    assert (run(loopback, frame, HOST), run(loopback, frame, OUTGOING)) == (bpf.MAX_CAPTURE, 0)
    assert run(udp_port_filter(PORT, 14), frame, OUTGOING) == bpf.MAX_CAPTURE


def test_jumps_go_forward_to_the_two_returns_and_pack_as_sock_filter() -> None:
    program = udp_port_filter(PORT, 14, capture_bytes=128, drop_outgoing=True)
    assert program[-2:] == [(bpf.RET_K, 0, 0, 128), (bpf.RET_K, 0, 0, 0)]
    for at, (code, jt, jf, _k) in enumerate(program):
        if code in (bpf.JEQ_K, bpf.JSET_K):
            assert at + 1 + max(jt, jf) < len(program)
    packed = pack(program)
    assert len(packed) == 8 * len(program)
    assert struct.unpack_from("=HBBI", packed, 8 * (len(program) - 2)) == (bpf.RET_K, 0, 0, 128)


@pytest.mark.parametrize(("port", "link"), [(0, 14), (65536, 14), (4791, 4)])
def test_a_bad_port_or_link_header_is_refused(port: int, link: int) -> None:
    with pytest.raises(ValueError, match=r"not a UDP port|the IP header starts"):
        udp_port_filter(port, link)
