"""TLS calls held until their SSL* is bound to a socket (tls_placement.py)."""

from __future__ import annotations

import pytest

from zerotrace_collector.probes import tls_placement
from zerotrace_collector.probes.event_layout import F_FD_UNKNOWN, Direction, SockOp, Source
from zerotrace_collector.probes.socket_decode import SocketDataSample
from zerotrace_collector.probes.tls_placement import UnplacedTls

pytestmark = pytest.mark.unit

SSL_A, SSL_B = 0x7F00_0000_1000, 0x7F00_0000_2000


def call(start: int, fd: int = -1, conn: int = SSL_A, pid: int = 10) -> SocketDataSample:
    return SocketDataSample(
        pid=pid,
        tid=pid,
        fd=fd,
        cgroup_id=1,
        start_mono_ns=start,
        end_mono_ns=start + 1,
        nbytes=5,
        conn_start_ns=conn,
        direction=Direction.EGRESS,
        source=Source.TLS,
        op=SockOp.SSL_WRITE,
        flags=F_FD_UNKNOWN if fd < 0 else 0,
        comm="client",
        payload=b"hello",
    )


def test_the_announcement_places_the_calls_held_for_its_ssl_in_order() -> None:
    held = UnplacedTls()
    held.hold(call(100), now_s=0.0)
    held.hold(call(50, conn=SSL_B), now_s=0.0)
    held.hold(call(150), now_s=0.1)
    assert held.bound(10, 0xDEAD, 7, 555) == []  # an SSL* nothing waits for
    placed = held.bound(10, SSL_A, 7, 555)
    assert [(s.start_mono_ns, s.fd, s.conn_start_ns) for s in placed] == [
        (100, 7, 555),
        (150, 7, 555),
    ]
    assert placed[0].payload == b"hello"
    assert len(held) == 1 and held.unplaced == 0
    assert held.bound(11, SSL_B, 7, 555) == []  # another process's SSL* at that address


def test_a_call_never_placed_is_dropped_and_counted() -> None:
    held = UnplacedTls()
    held.hold(call(100), now_s=0.0)
    held.hold(call(200, conn=SSL_B), now_s=0.5)
    held.expire(now_s=tls_placement.HOLD_S)
    assert len(held) == 2
    held.expire(now_s=tls_placement.HOLD_S + 0.01)
    assert (held.unplaced, len(held)) == (1, 1)
    held.expire(now_s=tls_placement.HOLD_S + 0.51)
    assert (held.unplaced, len(held)) == (2, 0)
    assert held.bound(10, SSL_A, 7, 555) == []


def test_past_its_bound_a_call_is_dropped_not_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls_placement, "MAX_HELD", 1)
    held = UnplacedTls()
    held.hold(call(1), now_s=0.0)
    held.hold(call(2), now_s=0.0)
    assert (held.unplaced, len(held)) == (1, 1)
