"""Live capture, a thin shell: an AF_PACKET socket on one interface (`lo` included) ->
CapturedPacket, written to a pcap file and/or handed to the pure pipeline.

`zerotrace capture` runs no kernel filter and no libpcap: every frame of the interface comes
up to Python, and the optional port filter runs here; fine for `lo` and test traffic, not for a
busy 100G link. A `LiveSocket` (the live RoCE feed's) instead asks the kernel to keep only UDP
datagrams to one port (a classic BPF socket filter, `udp_port_filter`), cut to a capture length,
and is read without blocking. Timestamps are the kernel's (SO_TIMESTAMPNS), taken when the frame
entered the receive path; `capture` hands frames on in timestamp order (time_order.py), each
after a short wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from zerotrace.errors import ConfigError, FeatureUnavailable
from zerotrace_collector.packets.bpf_filter import (
    ETHERNET_HEADER,
    Instruction,
    pack,
    udp_port_filter,
)
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.decode import TcpPacket, UdpPacket, decode_packet
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET, LINKTYPE_RAW
from zerotrace_collector.packets.pcap import DEFAULT_SNAPLEN, PcapWriter
from zerotrace_collector.packets.time_order import TimeOrder

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
# Python's socket module does not export it; 35 is SO_TIMESTAMPNS (_OLD) in
# asm-generic/socket.h, used by x86, arm and riscv. The control message carries a struct
# timespec: two native longs.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772
# On loopback every frame is seen twice, leaving (OUTGOING) and arriving (HOST); libpcap keeps
# only the arriving copy, and so do we.
PACKET_OUTGOING = 4
# How often a blocked read wakes up to check the stop condition and let held frames go (a
# frame waits DEFAULT_WINDOW_NS for late ones stamped before it, then up to this long more).
POLL_S = 0.05
# The kernel queues frames for us in the socket's receive buffer and drops them when it is
# full; Python reads slower than lo delivers 64 KiB frames, so ask for a roomy one (root may
# exceed net.core.rmem_max with SO_RCVBUFFORCE).
RCVBUF_BYTES = 64 * 1024 * 1024
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6  # struct tpacket_stats: packets, drops; reading it resets both
SO_ATTACH_FILTER = 26


@dataclass
class CaptureStats:
    interface: str
    linktype: int
    received: int = 0  # frames read from the socket
    loopback_copies: int = 0  # outgoing copies on loopback, dropped
    filtered_out: int = 0  # frames the port filter dropped
    kept: int = 0  # frames written and/or handed on
    truncated: int = 0  # frames longer than the capture length
    kernel_drops: int = 0  # frames the kernel dropped because the socket buffer was full
    reordered: int = 0  # frames that came after a later-stamped one, put back in time order
    late: int = 0  # frames that came later than the reorder window: written out of order


def parse_hardware_type(text: str, interface: str) -> int:
    """/sys/class/net/IF/type holds the ARPHRD_* number of the device."""
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"cannot read the device type of interface {interface!r}") from None


def interface_hardware_type(interface: str) -> int:
    """Raises ConfigError when there is no such interface."""
    if not interface or "/" in interface or interface in (".", ".."):
        raise ConfigError(f"{interface!r} is not a network interface name")
    try:
        text = Path(f"/sys/class/net/{interface}/type").read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"there is no network interface named {interface!r}; `ip link` lists them"
        ) from None
    return parse_hardware_type(text, interface)


def open_capture_socket(
    interface: str, udp_port: int | None = None, capture_bytes: int = DEFAULT_SNAPLEN
) -> tuple[socket.socket, int]:
    """A bound AF_PACKET socket and the link type of what it reads. Ethernet and loopback
    devices give whole Ethernet frames; others (tun, GRE, ...) give IP packets (raw IP).
    udp_port: the kernel keeps only UDP datagrams to that port, each cut to capture_bytes
    (and on loopback only the arriving copy), attached before bind so no other frame is
    ever queued."""
    hardware = interface_hardware_type(interface)
    ethernet = hardware in (ARPHRD_ETHER, ARPHRD_LOOPBACK)
    kind = socket.SOCK_RAW if ethernet else socket.SOCK_DGRAM
    try:
        # Protocol 0 receives nothing until bind names the interface, so no frame of another
        # interface slips in between socket() and bind().
        sock = socket.socket(socket.AF_PACKET, kind, 0)
    except PermissionError:
        raise FeatureUnavailable(
            "capturing packets needs root (CAP_NET_RAW): run `zerotrace capture` with sudo"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if udp_port is not None:
            program = udp_port_filter(
                udp_port,
                ETHERNET_HEADER if ethernet else 0,
                capture_bytes,
                drop_outgoing=hardware == ARPHRD_LOOPBACK,
            )
            attach_filter(sock, program)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        sock.bind((interface, ETH_P_ALL))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENODEV, errno.ENXIO):
            raise ConfigError(
                f"there is no network interface named {interface!r}; `ip link` lists them"
            ) from None
        raise FeatureUnavailable(f"cannot capture on {interface!r}: {exc.strerror}") from None
    # After the bind: the socket already queues what comes meanwhile (nothing is missed), and
    # the caller's "capturing" comes once frames are stamped on arrival.
    arrival_stamps_on()
    return sock, LINKTYPE_ETHERNET if ethernet else LINKTYPE_RAW


def attach_filter(sock: socket.socket, program: list[Instruction]) -> None:
    """SO_ATTACH_FILTER: struct sock_fprog is the instruction count and a pointer to them (the
    kernel copies the program during the call)."""
    code = ctypes.create_string_buffer(pack(program))
    fprog = struct.pack("@HP", len(program), ctypes.addressof(code))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def port_matches(packet: CapturedPacket, port: int | None) -> bool:
    """True when there is no port filter, or the frame is TCP or UDP from or to that port."""
    if port is None:
        return True
    decoded = decode_packet(packet)
    return isinstance(decoded, TcpPacket | UdpPacket) and port in (
        decoded.src_port,
        decoded.dst_port,
    )


def live_packets(
    interface: str,
    should_stop: Callable[[], bool],
    snaplen: int = DEFAULT_SNAPLEN,
    port: int | None = None,
    stats: CaptureStats | None = None,
) -> Iterator[CapturedPacket]:
    """Frames of `interface` as they come, until should_stop() returns True (checked at least
    every POLL_S seconds). Opens the socket at once, so ConfigError or FeatureUnavailable is
    raised here, not at the first frame; the socket closes when the iterator ends or is closed."""
    sock, linktype = open_capture_socket(interface)
    if stats is None:
        stats = CaptureStats(interface, linktype)
    stats.linktype = linktype
    return _frames(sock, linktype, should_stop, snaplen, port, stats)


def _frames(
    sock: socket.socket,
    linktype: int,
    should_stop: Callable[[], bool],
    snaplen: int,
    port: int | None,
    stats: CaptureStats,
) -> Iterator[CapturedPacket]:
    buf = bytearray(snaplen)
    order = TimeOrder()
    interrupted = False
    with sock:
        sock.settimeout(POLL_S)
        while not should_stop():
            try:
                n, ancdata, _flags, addr = sock.recvmsg_into(
                    [buf], socket.CMSG_SPACE(_TIMESPEC.size), socket.MSG_TRUNC
                )
            except TimeoutError:
                stats.kernel_drops += _drops(sock)
                yield from order.due(time.time_ns())
                continue
            except KeyboardInterrupt:
                interrupted = True  # the frames still held go out first, then Ctrl-C does
                break
            packet = _received(buf, n, ancdata, addr, linktype, snaplen, stats)
            if packet is None:
                continue
            if not port_matches(packet, port):
                stats.filtered_out += 1
                continue
            stats.kept += 1
            yield from order.push(packet)
        stats.kernel_drops += _drops(sock)
    stats.reordered, stats.late = order.reordered, order.late
    yield from order.flush()
    if interrupted:
        raise KeyboardInterrupt


def _received(
    buf: bytearray,
    n: int,
    ancdata: list[tuple[int, int, bytes]],
    addr: tuple[object, ...],
    linktype: int,
    snaplen: int,
    stats: CaptureStats,
) -> CapturedPacket | None:
    """One frame read from the socket (n bytes on the wire), or None for loopback's outgoing
    copy and for non-IP frames of a raw-IP device."""
    stats.received += 1
    _ifname, protocol, pkttype, hardware = addr[:4]
    if hardware == ARPHRD_LOOPBACK and pkttype == PACKET_OUTGOING:
        stats.loopback_copies += 1
        return None
    if linktype == LINKTYPE_RAW and protocol not in (ETH_P_IP, ETH_P_IPV6):
        stats.filtered_out += 1
        return None
    stats.truncated += n > snaplen
    return CapturedPacket(_timestamp_ns(ancdata), linktype, bytes(buf[: min(n, snaplen)]), n)


class LiveSocket:
    """A capture socket for a poll loop: the kernel keeps only UDP datagrams to `udp_port`
    (udp_port_filter), each cut to `capture_bytes`; `wait` blocks at most a timeout for one,
    `ready` takes at most `limit` of those queued now and never blocks. Frames come in the
    order the socket received them (not re-sorted: see time_order.py). Opening raises
    ConfigError (no such interface) or FeatureUnavailable (not root), each with one line.

    A frame longer than capture_bytes arrives cut, and MSG_TRUNC then reports the cut length
    (the filter trimmed it), so `truncated` does not count those: the IP and UDP headers
    still say how long the datagram was."""

    def __init__(self, interface: str, udp_port: int, capture_bytes: int) -> None:
        self._sock, linktype = open_capture_socket(interface, udp_port, capture_bytes)
        self._sock.setblocking(False)
        self._snaplen = capture_bytes
        self._buf = bytearray(capture_bytes)
        self.stats = CaptureStats(interface, linktype)

    def wait(self, timeout_s: float) -> bool:
        """True when a frame is queued; waits up to timeout_s for one."""
        readable, _, _ = select.select([self._sock], [], [], max(timeout_s, 0.0))
        return bool(readable)

    def ready(self, limit: int) -> list[CapturedPacket]:
        out: list[CapturedPacket] = []
        stats, linktype = self.stats, self.stats.linktype
        while len(out) < limit:
            try:
                n, ancdata, _flags, addr = self._sock.recvmsg_into(
                    [self._buf], socket.CMSG_SPACE(_TIMESPEC.size), socket.MSG_TRUNC
                )
            except BlockingIOError:
                break
            packet = _received(self._buf, n, ancdata, addr, linktype, self._snaplen, stats)
            if packet is not None:
                stats.kept += 1
                out.append(packet)
        return out

    def drops(self) -> int:
        """Frames the kernel dropped (receive buffer full) since the last call; added to
        stats.kernel_drops too."""
        drops = _drops(self._sock)
        self.stats.kernel_drops += drops
        return drops

    def close(self) -> None:
        self._sock.close()


def _drops(sock: socket.socket) -> int:
    _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return int(drops)


def capture(
    interface: str,
    seconds: float | None = None,
    stop_event: threading.Event | None = None,
    pcap_path: str | Path | None = None,
    port: int | None = None,
    snaplen: int = DEFAULT_SNAPLEN,
    on_packet: Callable[[CapturedPacket], None] | None = None,
) -> CaptureStats:
    """Capture on `interface` until `seconds` have passed or `stop_event` is set (or Ctrl-C),
    writing a nanosecond pcap to pcap_path and/or calling on_packet for each frame kept.
    Raises ConfigError (no such interface, no stop condition) or FeatureUnavailable (not
    root), each with one line, before any file is created."""
    if seconds is None and stop_event is None:
        raise ConfigError("capture needs a duration or a stop event")
    deadline = None if seconds is None else time.monotonic() + seconds

    def should_stop() -> bool:
        if stop_event is not None and stop_event.is_set():
            return True
        return deadline is not None and time.monotonic() >= deadline

    stats = CaptureStats(interface, LINKTYPE_ETHERNET)
    frames = live_packets(interface, should_stop, snaplen, port, stats)
    with contextlib.ExitStack() as stack:
        stack.callback(getattr(frames, "close", lambda: None))
        writer = None
        if pcap_path is not None:
            out = stack.enter_context(_private_file(pcap_path))
            writer = PcapWriter(out, stats.linktype, snaplen)
        with contextlib.suppress(KeyboardInterrupt):
            for packet in frames:
                if writer is not None:
                    writer.write(packet)
                if on_packet is not None:
                    on_packet(packet)
    return stats


# How long to wait for the kernel to stamp frames on arrival once a socket asked for stamps.
ARRIVAL_STAMPS_WAIT_S = 2.0
_STAMP_PROBE_GAP_S = 0.002  # between a probe datagram's send and its read


def arrival_stamps_on(wait_s: float = ARRIVAL_STAMPS_WAIT_S) -> bool:
    """Wait until the kernel stamps received frames when they arrive; False if it still did not
    after wait_s. Why: the first socket on a host to ask for timestamps turns stamping on
    through deferred kernel work (net_enable_timestamp schedules it); until that has run, a
    frame is queued unstamped and the kernel stamps it when it is *read*. A capture read
    seconds later (a loaded node, a collector at its CPU budget) would then time its first
    frames by when they were read: wrong latencies, frames out of order. A loopback datagram
    read a little after it was sent tells: stamped on arrival, its stamp is before the read."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.bind(("127.0.0.1", 0))
        receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        deadline = time.monotonic() + wait_s
        while True:
            sender.sendto(b"t", receiver.getsockname())
            time.sleep(_STAMP_PROBE_GAP_S)
            read_at = time.time_ns()
            _data, ancdata, _flags, _addr = receiver.recvmsg(16, socket.CMSG_SPACE(_TIMESPEC.size))
            if _stamp_of(ancdata) < read_at:
                return True
            if time.monotonic() >= deadline:
                return False
    except OSError:
        return False  # no loopback to ask (a bare namespace): the capture goes on as it is
    finally:
        receiver.close()
        sender.close()


def _stamp_of(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The kernel's SO_TIMESTAMPNS stamp, or a time after every stamp when there is none."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return 1 << 63


def _timestamp_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return time.time_ns()  # the kernel always sends one once SO_TIMESTAMPNS is set


def _private_file(path: str | Path) -> BinaryIO:
    """The capture file, readable by its owner only (0600, an existing file too): it holds
    every byte the interface carried, credentials and prompts included, as tcpdump's would."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")
