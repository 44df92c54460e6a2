"""`zerotrace analyze` and `zerotrace capture` (zerotrace_cli/packet_cmds.py): a capture file of
one streamed chat completion, built here frame by frame, through the same correlator as live
traffic, to the LLM table, the counts and the JSON lines; an unreadable file is one line.
Capturing from an interface needs root and is tests/kernel/test_af_packet.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.http_wire import CHAT_PATH, LAST_CHUNK, SSE_HEAD, chat_delta, chunk, post, sse
from zerotrace import names
from zerotrace_cli import build_parser, main
from zerotrace_collector.packets import frames
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.link import LINKTYPE_ETHERNET
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.tcp import ACK, FIN, PSH, SYN

pytestmark = pytest.mark.unit

C, S = "10.1.0.5", "10.1.0.9"
CP, SP = 51000, 8000
T0 = 1_700_000_000_000_000_000
MS = 1_000_000
REQUEST = post(CHAT_PATH, {"model": "llama-3.1-8b-instruct", "stream": True, "messages": []})
EVENTS = [chat_delta("Hi"), chat_delta(" there"), chat_delta(None, finish="stop")]


def chat_capture() -> bytes:
    """Handshake, the request, the response head then one chunk per event 10 ms apart, FINs."""
    cseq, sseq = 1001, 5001
    out = [
        (C, CP, S, SP, 1000, 0, SYN, b""),
        (S, SP, C, CP, 5000, cseq, SYN | ACK, b""),
        (C, CP, S, SP, cseq, sseq, ACK, b""),
        (C, CP, S, SP, cseq, sseq, ACK | PSH, REQUEST),
    ]
    cseq += len(REQUEST)
    parts = [SSE_HEAD, *(chunk(sse(e)) for e in EVENTS), chunk(sse("[DONE]")) + LAST_CHUNK]
    for part in parts:
        out.append((S, SP, C, CP, sseq, cseq, ACK | PSH, part))
        sseq += len(part)
    out += [
        (C, CP, S, SP, cseq, sseq, ACK | FIN, b""),
        (S, SP, C, CP, sseq, cseq + 1, ACK | FIN, b""),
    ]
    packets = [
        CapturedPacket(T0 + i * 10 * MS, LINKTYPE_ETHERNET, frames.tcp_frame(*f), 0)
        for i, f in enumerate(out)
    ]
    return pcap_bytes(packets, LINKTYPE_ETHERNET)


def test_analyze_prints_the_llm_table_and_what_it_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pcap = tmp_path / "chat.pcap"
    pcap.write_bytes(chat_capture())
    out = tmp_path / "records.jsonl"
    assert main(["analyze", str(pcap), "--json", str(out)]) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert lines[0].startswith("TIME ") and "TTFT ms" in lines[0]
    # Seen on the wire ("net"): the request at 30 ms, "Hi" at 50 ms, " there" at 60 ms.
    assert lines[1].split() == [
        "22:13:20.030",
        "llama-3.1-8b-instruct",
        "chat.completions",
        "net",
        "20.0",
        "10.0",
        "~2",
        "100.0",
        "200",
        "stop",
    ]
    assert "11 packets, 1 HTTP exchanges, 1 LLM requests" in lines
    assert "counted: bytes 793, flows 1, masked 2, records 8, segments 11, tcp 11" in lines
    assert "correlator: http.conns.closed 1, http.exchanges 1" in lines
    assert printed.err == ""
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_record = {r["record"] for r in records}
    assert by_record == {names.DERIVED_LLM.record, names.DERIVED_SPAN.record}
    [llm] = [r for r in records if r["record"] == names.DERIVED_LLM.record]
    assert (llm["model"], llm["stream"], llm["observation_point"]) == (
        "llama-3.1-8b-instruct",
        True,
        "NETWORK",
    )


def test_an_unreadable_capture_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nosuch.pcap"
    assert main(["analyze", str(missing)]) == 1
    assert capsys.readouterr().err == (
        f"zerotrace: cannot read {missing}: No such file or directory\n"
    )


def test_capture_wants_a_file_to_write() -> None:
    parser = build_parser()
    args = parser.parse_args(["capture", "-w", "out.pcap", "--port", "8000"])
    assert (args.interface, args.write, args.port, args.duration) == (
        "lo",
        Path("out.pcap"),
        8000,
        None,
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["capture"])
