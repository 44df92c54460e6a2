"""The capture socket waits until the kernel stamps frames on arrival (af_packet.py
arrival_stamps_on): a frame queued before stamping is on would be stamped when it is read."""

from __future__ import annotations

import socket
import time

import pytest

from zerotrace_collector.packets import af_packet

pytestmark = pytest.mark.unit


def test_once_stamping_is_on_a_datagram_is_stamped_before_it_is_read() -> None:
    # A socket that asked for stamps holds the kernel's stamping on, as a capture socket does.
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, af_packet.SO_TIMESTAMPNS, 1)
        started = time.monotonic()
        assert af_packet.arrival_stamps_on(wait_s=2.0)
        assert time.monotonic() - started < 2.0
    finally:
        holder.close()


def test_a_read_without_a_stamp_never_passes_for_an_arrival_stamp() -> None:
    assert af_packet._stamp_of([]) > time.time_ns()
    stamp = af_packet._TIMESPEC.pack(12, 345)
    assert af_packet._stamp_of([(socket.SOL_SOCKET, af_packet.SO_TIMESTAMPNS, stamp)]) == (
        12_000_000_345
    )
