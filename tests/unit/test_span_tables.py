"""`zerotrace analyze`'s tables of other protocols (zerotrace_cli/span_tables.py): a Redis
conversation captured on the wire comes out as a redis table with each command, its duration,
status and server; HTTP and file spans are not in these tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_packet_cmds import CP, MS, T0, C, S
from zerotrace import names
from zerotrace_cli import main
from zerotrace_cli.span_tables import protocol_of, render_protocol_tables
from zerotrace_collector.packets import frames
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.tcp import ACK, FIN, PSH, SYN

pytestmark = pytest.mark.unit

REDIS_PORT = 6379
TALK = [
    (True, b"*2\r\n$3\r\nGET\r\n$7\r\nuser:42\r\n"),
    (False, b"$5\r\nalice\r\n"),
    (True, b"*2\r\n$4\r\nINCR\r\n$4\r\nname\r\n"),
    (False, b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
]


def redis_capture() -> bytes:
    cseq, sseq = 1001, 5001
    out = [
        (C, CP, S, REDIS_PORT, 1000, 0, SYN, b""),
        (S, REDIS_PORT, C, CP, 5000, cseq, SYN | ACK, b""),
        (C, CP, S, REDIS_PORT, cseq, sseq, ACK, b""),
    ]
    for from_client, payload in TALK:
        if from_client:
            out.append((C, CP, S, REDIS_PORT, cseq, sseq, ACK | PSH, payload))
            cseq += len(payload)
        else:
            out.append((S, REDIS_PORT, C, CP, sseq, cseq, ACK | PSH, payload))
            sseq += len(payload)
    out += [
        (C, CP, S, REDIS_PORT, cseq, sseq, ACK | FIN, b""),
        (S, REDIS_PORT, C, CP, sseq, cseq + 1, ACK | FIN, b""),
    ]
    packets = [
        CapturedPacket(T0 + i * MS, LINKTYPE_ETHERNET, frames.tcp_frame(*f), 0)
        for i, f in enumerate(out)
    ]
    return pcap_bytes(packets, LINKTYPE_ETHERNET)


def test_analyze_prints_a_table_per_protocol_before_the_llm_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pcap = tmp_path / "redis.pcap"
    pcap.write_bytes(redis_capture())
    assert main(["analyze", str(pcap)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "redis: 2 spans, 1 failed"
    assert lines[1].split() == ["TIME", "DURATION", "ms", "STATUS", "SERVER", "OPERATION"]
    get, incr = lines[2].split(), lines[3].split()
    assert get[1:] == ["1.00", "ok", f"{S}:{REDIS_PORT}", "GET", "GET", "?"]
    assert incr[1:4] == ["1.00", "WRONGTYPE", f"{S}:{REDIS_PORT}"] and incr[4] == "INCR"
    assert "9 packets, 0 HTTP exchanges, 0 LLM requests, 2 spans of other protocols" in lines


def test_http_and_file_spans_are_left_to_their_own_views() -> None:
    spans = [
        {"kind": names.SPAN_KIND_HTTP_CLIENT, "start_ns": 1, "end_ns": 2, "name": "GET /"},
        {"kind": names.SPAN_KIND_FILE_OPEN, "start_ns": 1, "end_ns": 2, "name": "open"},
    ]
    assert render_protocol_tables(spans) == []
    assert protocol_of({"kind": "postgresql.server"}) == "postgresql"
