"""Kernel test: live AF_PACKET capture on `lo` while a real TCP client and server exchange
known data; the pcap read back reassembles to exactly the bytes sent, in both directions and
in order, also after its packets are reordered and duplicated. No tcpdump or tshark involved.

Needs root (CAP_NET_RAW). Run:  sudo .venv/bin/python -m pytest tests/kernel/test_af_packet.py
"""

from __future__ import annotations

import ctypes
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from zerotrace.errors import ConfigError
from zerotrace_collector.packets.af_packet import CaptureStats, capture
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.capture_file import read_capture
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.pcap import pcap_bytes

pytestmark = pytest.mark.kernel

if os.geteuid() != 0:
    _reason = "AF_PACKET capture needs root (CAP_NET_RAW)"
    if os.environ.get("ZEROTRACE_REQUIRE_KERNEL") == "1":
        pytest.fail(_reason, pytrace=False)
    pytest.skip(_reason, allow_module_level=True)

N_PAIRS = 23
_rng = random.Random(23)
# Sizes from one byte to several segments (lo's MTU is 64 KiB), one pair past the 64 KiB
# record split in each direction.
REQUESTS = [_rng.randbytes(_rng.choice([1, 17, 700, 1500, 9000])) for _ in range(N_PAIRS)]
RESPONSES = [_rng.randbytes(_rng.choice([3, 100, 4096, 20000])) for _ in range(N_PAIRS)]
REQUESTS[11] = _rng.randbytes(200_000)
RESPONSES[12] = _rng.randbytes(300_000)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "peer closed early"
        out += chunk
    return bytes(out)


def _packet_sockets() -> int:
    return len(Path("/proc/net/packet").read_text().splitlines())


def _exchange(listener: socket.socket) -> int:
    """23 request/response pairs over one connection; returns the client's port."""

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            for req, resp in zip(REQUESTS, RESPONSES, strict=True):
                assert _recv_exactly(conn, len(req)) == req
                conn.sendall(resp)
            assert conn.recv(1) == b""  # the client's FIN

    server = threading.Thread(target=serve)
    server.start()
    with socket.create_connection(listener.getsockname()) as client:
        client_port = client.getsockname()[1]
        for req, resp in zip(REQUESTS, RESPONSES, strict=True):
            client.sendall(req)
            assert _recv_exactly(client, len(resp)) == resp
    server.join(10)
    return int(client_port)


def _streams(records: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str], bytes]:
    out: dict[tuple[str, str], bytes] = {}
    for name, r in records:
        if name == "zerotrace.raw.SocketData":
            assert not r["payload_truncated"], r["event_id"]
            key = (r["conn_id"], r["direction"])
            out[key] = out.get(key, b"") + r["payload"]
    return out


def _reordered(packets: list[CapturedPacket], seed: int) -> list[CapturedPacket]:
    """Packets reordered within small windows and some duplicated, with timestamps that still
    rise in file order: what a capture behind a reordering, duplicating network looks like."""
    rng = random.Random(seed)
    out = list(packets)
    for dup in rng.sample(packets, len(packets) // 5):
        out.insert(out.index(dup) + rng.randint(1, 4), dup)
    size = 6
    for i in range(0, len(out), size):
        window = out[i : i + size]
        rng.shuffle(window)
        out[i : i + size] = window
    times = sorted(p.ts_ns for p in out)
    return [
        CapturedPacket(t, p.linktype, p.data, p.orig_len) for t, p in zip(times, out, strict=True)
    ]


def test_capture_on_lo_reassembles_exactly_the_bytes_sent(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    pcap = tmp_path / "lo.pcap"
    stop = threading.Event()
    result: dict[str, CaptureStats] = {}
    before = _packet_sockets()
    thread = threading.Thread(
        target=lambda: result.update(
            stats=capture("lo", stop_event=stop, pcap_path=pcap, port=port)
        )
    )
    thread.start()
    deadline = time.monotonic() + 5
    while _packet_sockets() <= before:  # the capture socket is bound: traffic may start
        assert time.monotonic() < deadline and thread.is_alive(), "capture did not start"
        time.sleep(0.01)
    with listener:
        client_port = _exchange(listener)
    time.sleep(0.3)  # the last FIN and ACK
    stop.set()
    thread.join(5)
    stats = result["stats"]
    assert stats.kept > 2 * N_PAIRS and stats.loopback_copies > 0
    assert (stats.truncated, stats.kernel_drops) == (0, 0)
    assert pcap.stat().st_mode & 0o777 == 0o600  # every byte the interface carried: owner only

    analysis = PcapAnalysis("node-k")
    records = list(analysis.records(pcap))
    assert analysis.read.problem is None and analysis.read.format == "pcap-ns"
    [conn_id] = {r["conn_id"] for _, r in records}
    assert _streams(records) == {
        (conn_id, "EGRESS"): b"".join(REQUESTS),
        (conn_id, "INGRESS"): b"".join(RESPONSES),
    }
    events = [(r["kind"], r["local_port"], r["remote_port"]) for n, r in records if "Conn" in n]
    assert events == [("CONNECT", client_port, port), ("CLOSE", client_port, port)]
    times = [int(r["start_ns"] if "start_ns" in r else r["ts_ns"]) for _, r in records]
    assert times == sorted(times)
    counters = analysis.reassembler.counters
    assert (counters.gaps, counters.flows, counters.flows_without_syn) == (0, 1, 0)
    assert counters.bytes == sum(map(len, REQUESTS + RESPONSES))
    assert max(len(r["payload"]) for _, r in records if "payload" in r) <= 64 * 1024

    packets, report = read_capture(pcap.read_bytes())
    assert report.problem is None
    for seed in range(5):
        shuffled = pcap_bytes(_reordered(packets, seed), packets[0].linktype)
        again = PcapAnalysis("node-k")
        got = _streams(list(again.records(shuffled)))
        assert {d: data for (_, d), data in got.items()} == {
            "EGRESS": b"".join(REQUESTS),
            "INGRESS": b"".join(RESPONSES),
        }
        assert len({c for c, _ in got}) == 1
        assert again.reassembler.counters.out_of_order > 0
        assert again.reassembler.counters.gaps == 0
        assert again.reassembler.counters.retransmissions > 0


def test_no_external_tool_is_needed(tmp_path: Path) -> None:
    """A timed capture in a process with an empty PATH: no tcpdump, tshark or libpcap."""
    pcap = tmp_path / "empty-path.pcap"
    code = (
        "import sys; from zerotrace_collector.packets.af_packet import capture; "
        f"s = capture('lo', seconds=0.5, pcap_path={str(pcap)!r}); print(s.received)"
    )
    env = {"PATH": "/nonexistent", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _, report = read_capture(pcap.read_bytes())
    assert report.problem is None and report.format == "pcap-ns"


def test_clear_errors_for_a_missing_interface_and_without_root() -> None:
    with pytest.raises(ConfigError, match="no network interface named 'zt-nope0'"):
        capture("zt-nope0", seconds=0.1)
    code = (
        "from zerotrace.errors import FeatureUnavailable\n"
        "from zerotrace_collector.packets.af_packet import capture\n"
        "try:\n    capture('lo', seconds=0.1)\n"
        "except FeatureUnavailable as e:\n    print(e)\n"
    )
    env = {"PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=_drop_cap_net_raw,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "capturing packets needs root (CAP_NET_RAW): run `zerotrace capture` with sudo"
    )


def _drop_cap_net_raw() -> None:
    """In the child before exec: without CAP_NET_RAW in the bounding set, root's program
    starts without it (what a non-root user has), and the files stay readable."""
    pr_capbset_drop, cap_net_raw = 24, 13
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_capbset_drop, cap_net_raw, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
