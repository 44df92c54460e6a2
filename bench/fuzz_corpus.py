"""The seed corpus of every `bench.fuzz` target: valid inputs built in code, from the builders
the parsers' own tests and benches use (HTTP and SSE wire bytes, LLM conversations, frames of
every link type, pcapng blocks, socket-probe records, Avro records). Mutations start from
these, so most inputs get past a parser's first checks and reach its deeper states.

Some targets read a control byte before their payload (see `bench.fuzz_targets`); the seeds
set it to what the valid input needs, and mutations then change it too.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from bench.collector_stages import LLM_REQUEST, LLM_RESPONSE, REQUEST, RESPONSE, probe_records
from bench.fuzz_script import script
from tests.harness.llm_conversations import conversation, interleaved
from tests.unit.h2_wire import PREFACE, client_wire, server_wire
from tests.unit.http_wire import (
    CHAT_PATH,
    LAST_CHUNK,
    SSE_HEAD,
    chat_delta,
    chunk,
    close,
    json_response,
    post,
    sse,
    usage,
)
from tests.unit.test_pcapng import epb, idb, obsolete_pb, shb, spb
from tests.unit.test_socket_decode import conn_event, data_event, sockaddr_in
from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.socket_batch import socket_batch_of
from zerotrace_collector.packets import frames
from zerotrace_collector.packets.captured import CapturedPacket
from zerotrace_collector.packets.link import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    SUPPORTED_LINKTYPES,
)
from zerotrace_collector.packets.pcap import pcap_bytes
from zerotrace_collector.packets.tcp import ACK, FIN, PSH, RST, SYN
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator

MS = 1_000_000
CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 8000)

# -- HTTP/1, SSE, OpenAI bodies ---------------------------------------------------------------


def chat_request(stream: bool = True) -> dict[str, Any]:
    return {
        "model": "served-model",
        "stream": stream,
        "stream_options": {"include_usage": True},
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Summarise the report."}],
    }


def sse_bodies() -> list[bytes]:
    """Event streams as a server writes them: chat, completions and Responses events, usage,
    errors, comments, [DONE], every line ending."""
    chat = b"".join(sse(chat_delta(f"w{i}")) for i in range(4))
    tail = sse({"choices": [], "usage": usage(3, 4, cached=1), "model": "m"}) + sse("[DONE]")
    reasoning = sse(chat_delta(reasoning_content="think")) + sse(chat_delta(finish="stop"))
    tools = sse(chat_delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a":1}'}}]))
    completions = sse({"choices": [{"index": 0, "text": "hi", "finish_reason": None}]})
    responses = sse({"type": "response.output_text.delta", "delta": "hi"}, "x") + sse(
        {
            "type": "response.completed",
            "response": {"model": "m", "status": "completed", "usage": {"output_tokens": 1}},
        },
        "response.completed",
    )
    error = sse({"error": {"message": "overloaded", "code": 503}})
    odd = b"\xef\xbb\xbf: keep-alive\r\nretry: 10\r\nid: 7\r\ndata: {}\r\n\r\ndata: a\rdata: b\r\r"
    return [chat + tail, reasoning, tools, completions, responses, error, odd]


def json_bodies() -> list[bytes]:
    whole = {
        "model": "m",
        "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": usage(3, 1),
    }
    responses = {
        "model": "m",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"content": [{"type": "output_text", "text": "hi"}]}],
    }
    return [json.dumps(obj).encode() for obj in (whole, responses, chat_request())]


def http_requests() -> list[bytes]:
    return [
        post(CHAT_PATH, chat_request()),
        post("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
        REQUEST + REQUEST,  # pipelined
        LLM_REQUEST,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk(b'{"model": "m", "prompt": "hi"}')
        + b"0\r\nx-trailer: 1\r\n\r\n",
        b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\nCONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    ]


def http_responses() -> list[bytes]:
    stream = SSE_HEAD + b"".join(chunk(body) for body in sse_bodies()[:3]) + LAST_CHUNK
    return [
        stream,
        RESPONSE,
        json_response(json.loads(json_bodies()[0])),
        json_response({"error": {"message": "no"}}, status="429 Too Many Requests"),
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n",
    ]


def http1_corpus() -> list[bytes]:
    return http_requests() + http_responses()


def sse_corpus() -> list[bytes]:
    return sse_bodies()


def openai_corpus() -> list[bytes]:
    return sse_bodies() + json_bodies()


# -- the correlator: socket calls with a control byte -------------------------------------------


def control(direction: str, conn: int) -> int:
    """The `conversation` target's control byte: bit 0 the direction, bits 1-4 the connection
    (bits 5-7, a truncated capture, a CLOSE after, lost bytes before, are clear in seeds)."""
    return (direction == "INGRESS") | (conn % 16) << 1


def calls(pairs: list[tuple[str, bytes]], conn: int) -> bytes:
    return script((control(direction, conn), payload) for direction, payload in pairs)


def conversation_corpus() -> list[bytes]:
    """Whole exchanges, one script each (`bench.fuzz_script`): chat streams seen at the
    client, two streams interleaved, a plain keep-alive pair and a non-streamed chat, and a
    stream seen at the server."""
    out = []
    for n in range(2):
        out.append(calls([(r["direction"], r["payload"]) for r in conversation(f"c{n}", 0, 3)], n))
    rounds = [r for round_ in interleaved(2, 0, tokens=2, prefix="c") for r in round_]
    out.append(
        script((control(r["direction"], int(r["conn_id"][1:]) + 4), r["payload"]) for r in rounds)
    )
    whole = json_response(json.loads(json_bodies()[0]))
    plain = [("EGRESS", REQUEST), ("INGRESS", RESPONSE)]
    plain += [("EGRESS", post(CHAT_PATH, chat_request(False))), ("INGRESS", whole)]
    out.append(calls(plain, 2))
    out.append(calls([("INGRESS", LLM_REQUEST), ("EGRESS", SSE_HEAD + LLM_RESPONSE)], 3))
    return out


# -- packets: frames, pcap, pcapng --------------------------------------------------------------


def tcp_conversation(linktype: int, v6: bool = False, cport: int = 40000) -> list[CapturedPacket]:
    """A whole HTTP exchange over TCP: handshake, request, SSE response in two segments, FIN."""
    (c, _), (s, sport) = CLIENT, SERVER
    if v6:
        c, s = "fd00::1", "fd00::2"
    request, response = LLM_REQUEST, SSE_HEAD + LLM_RESPONSE
    half = len(response) // 2
    segments = [
        (c, cport, s, sport, 100, 0, SYN, b""),
        (s, sport, c, cport, 900, 101, SYN | ACK, b""),
        (c, cport, s, sport, 101, 901, ACK, b""),
        (c, cport, s, sport, 101, 901, ACK | PSH, request),
        (s, sport, c, cport, 901, 101 + len(request), ACK | PSH, response[:half]),
        (s, sport, c, cport, 901 + half, 101 + len(request), ACK | PSH, response[half:]),
        (c, cport, s, sport, 101 + len(request), 901 + len(response), ACK | FIN, b""),
        (s, sport, c, cport, 901 + len(response), 102 + len(request), ACK | FIN, b""),
        (c, cport, s, sport, 102 + len(request), 902 + len(response), ACK | RST, b""),
    ]
    return [
        CapturedPacket(
            n * MS,
            linktype,
            frames.tcp_frame(src, sp, dst, dp, seq, ack, flags, payload, linktype),
            0,
        )
        for n, (src, sp, dst, dp, seq, ack, flags, payload) in enumerate(segments)
    ]


FRAME_LINKTYPES = (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)


def frame_corpus() -> list[bytes]:
    """Frames with a control byte before them: its low 3 bits pick the link type among
    SUPPORTED_LINKTYPES (the `packet_decode` target)."""
    out = []
    for linktype in FRAME_LINKTYPES:
        for v6 in (False, True):
            for packet in tcp_conversation(linktype, v6):
                out.append(bytes([SUPPORTED_LINKTYPES.index(linktype)]) + packet.data)
    return out


def capture_corpus() -> list[bytes]:
    """Whole TCP conversations as scripts of frames (`tcp_reassembly`, `pcap_analysis`): the
    control byte's low 3 bits pick the link type, its high bits are 0 (1 ms a packet)."""
    out = []
    for n, linktype in enumerate(FRAME_LINKTYPES):
        for v6 in (False, True):
            packets = tcp_conversation(linktype, v6, cport=40000 + 2 * n + v6)
            ctl = SUPPORTED_LINKTYPES.index(linktype)
            out.append(script((ctl, packet.data) for packet in packets))
    return out


def pcap_corpus() -> list[bytes]:
    out = [pcap_bytes(tcp_conversation(linktype), linktype) for linktype in FRAME_LINKTYPES]
    # Big-endian, microseconds: the other magic and byte order.
    packets = tcp_conversation(LINKTYPE_RAW, v6=True)
    head = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_RAW)
    records = [struct.pack(">IIII", 1, n, len(p.data), len(p.data)) + p.data
               for n, p in enumerate(packets)]  # fmt: skip
    return [*out, head + b"".join(records)]


def pcapng_corpus() -> list[bytes]:
    out = []
    for order in ("<", ">"):
        eth = tcp_conversation(LINKTYPE_ETHERNET)
        raw = tcp_conversation(LINKTYPE_RAW, v6=True)
        blocks = [shb(order), idb(order, LINKTYPE_ETHERNET, tsresol=9)]
        blocks += [idb(order, LINKTYPE_RAW, tsresol=0x86, tsoffset=5)]
        blocks += [epb(order, n % 2, n * 1000, p.data) for n, p in enumerate(eth + raw)]
        blocks += [spb(order, eth[3].data), obsolete_pb(order, 1, 7, raw[4].data)]
        blocks += [struct.pack(order + "II", 0xBAD, 16) + b"\0" * 4 + struct.pack(order + "I", 16)]
        out.append(b"".join(blocks))
    return out


# -- socket-probe records, Avro messages --------------------------------------------------------


def socket_event_corpus() -> list[bytes]:
    out = list(probe_records(4, 2, llm=False)) + list(probe_records(4, 2, llm=True))
    out.append(data_event(flags=0x18, tcp_seq=12345, waited_us=40, payload=RESPONSE, ret=500))
    out.append(data_event(direction=1, op=1, payload=b"", ret=0x7FFF))
    out.append(conn_event(addr=sockaddr_in("10.1.2.3", 443)))
    out.append(conn_event(kind=3, ret=0))
    return out


def redaction_corpus() -> list[bytes]:
    secret = b'{"api_key": "sk-abcdefghijklmnopqrstuvwxyz", "content": "a \\"quoted\\" text"}'
    return [
        LLM_REQUEST,
        b"GET /v1/models?api_key=abc123&x=1 HTTP/1.1\r\nCookie: s=1\r\nX-Api-Key: k\r\n\r\n",
        post(CHAT_PATH, chat_request(), extra=b"Authorization: Basic dXNlcjpwYXNz\r\n"),
        chunk(sse(chat_delta("secret words"))),
        chunk(secret) + b"\r\n",
        b'{"prompt": ["one", "two"], "input": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdef"}',
        b"token ghp_0123456789abcdefghijABCDEFGHIJ and AKIA0123456789ABCDEF",
        # HTTP/2 (redaction_h2): a client's and a server's side, Huffman and raw, padded or
        # not; frames without the preface (a connection joined midway); a 101 to h2c.
        client_wire(2, huffman=True, pad=3),
        client_wire(1, huffman=False, pad=0),
        client_wire(1)[len(PREFACE) :],
        server_wire(2, huffman=True, pad=0),
        server_wire(1, huffman=False, pad=2),
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n" + server_wire(1),
    ]


def avro_corpus(codec: AvroCodec) -> list[bytes]:
    """Every record kind the correlator reads or writes, encoded: SocketData, SocketBatch,
    ConnEvent (its input), Span and LlmRequest (its output, from a real correlation)."""
    records = conversation("c0", 0, tokens=3)
    out = [codec.encode(names.RAW_SOCKET.record, r) for r in records[:3]]
    out.append(codec.encode(names.SOCKET_BATCH_RECORD, socket_batch_of(records)))
    out.append(codec.encode(names.RAW_CONN.record, close(10 * MS, "c0")))
    correlator = HttpLlmCorrelator()
    derived = [o for r in records for o in correlator.feed_socket(r)]
    derived += correlator.flush()
    out += [codec.encode(record, datum) for record, datum in derived]
    return out


CORPORA: dict[str, Callable[[], list[bytes]]] = {
    "http1": http1_corpus,
    "sse": sse_corpus,
    "openai_stream": openai_corpus,
    "conversation": conversation_corpus,
    "pcap": pcap_corpus,
    "pcapng": pcapng_corpus,
    "packet_decode": frame_corpus,
    "tcp_reassembly": capture_corpus,
    "pcap_analysis": capture_corpus,
    "socket_decode": socket_event_corpus,
    "redaction": redaction_corpus,
}
