"""Which parser reads a TCP connection that does not speak HTTP/1.x: every protocol the
correlator understands besides HTTP, with the check of a connection's first bytes. Pure.

Order matters only where two checks could both say yes; each module's `recognise` is written
to refuse the others' first bytes (their tests hold the cases), so the order is by how common
the protocol is beside an AI service. Where the server may speak first (MySQL's greeting, or
its refusal), `sent_by_server` tells whether the recognised bytes were the server's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zerotrace import names
from zerotrace_correlator import dns, http2, kafka_wire, mysql, mysql_wire, postgres, redis_resp
from zerotrace_correlator.protocol_span import ProtocolParser


@dataclass(frozen=True)
class ProtocolEntry:
    name: str
    recognise: Callable[[bytes], bool]
    make: Callable[[], ProtocolParser]
    sent_by_server: Callable[[bytes], bool] = lambda first: False
    # The parser for the client's own view, where the rules differ (OpenTelemetry: a 4xx
    # answer fails a client's HTTP span, a server's only from 500); None: `make` for all.
    make_client: Callable[[], ProtocolParser] | None = None


PROTOCOLS: tuple[ProtocolEntry, ...] = (
    ProtocolEntry(names.PROTOCOL_REDIS, redis_resp.recognise, redis_resp.RedisParser),
    ProtocolEntry(names.PROTOCOL_POSTGRESQL, postgres.recognise, postgres.PostgresParser),
    ProtocolEntry(
        names.PROTOCOL_MYSQL, mysql.recognise, mysql.MySqlParser, mysql_wire.sent_by_server
    ),
    ProtocolEntry(names.PROTOCOL_KAFKA, kafka_wire.recognise, kafka_wire.KafkaWireParser),
    # UDP or TCP, told by the first query (dns.transport_of).
    ProtocolEntry(names.PROTOCOL_DNS, dns.recognise, dns.DnsParser),
    # Last: its check of a connection joined mid-way (frame headers) is the loosest.
    ProtocolEntry(
        names.PROTOCOL_HTTP2,
        http2.recognise,
        http2.Http2Parser,
        http2.sent_by_server,
        make_client=lambda: http2.Http2Parser(client_view=True),
    ),
)


def recognise(first_bytes: bytes) -> ProtocolEntry | None:
    """The protocol whose first message `first_bytes` starts, if any."""
    for entry in PROTOCOLS:
        if entry.recognise(first_bytes):
            return entry
    return None
