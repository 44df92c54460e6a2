"""Spans as Zipkin v2 JSON (pure): linked span documents -> the body of POST /api/v2/spans.

The input is what `trace_trees.link` returns: span documents with `trace_id` and
`parent_span_id` set from the links. The output follows Zipkin's v2 model (zipkin2-api.yaml):

- Ids as they are: trace id 32 lower-hex characters, span and parent ids 16. A span whose ids
  are not hex of those lengths (never written by the correlator) is refused with PoisonInput:
  Zipkin answers a whole batch with 400 for one bad id, so the caller leaves it out and counts it.
- Kind from the kind's side: "*.client" CLIENT, "*.server" SERVER; any other (a file open) has
  none, which Zipkin reads as a local span.
- Times in microseconds, as Zipkin wants them: the timestamp is the start rounded down, the
  duration runs to the end rounded up (at least 1), so a child stays inside its parent.
- Endpoints from the connection's addresses (exchange_records.endpoint_attributes): a client
  span's local end is client.address/port, its remote end server.address/port; a server span
  the other way round. The local end's service name is the span's service. A client span's
  remote end is named too, as Zipkin needs to draw a call to a process nobody observed on its
  dependency graph: a database by its system ("redis", "postgresql"), as Brave's own database
  instrumentations name it, a queue by its messaging system, anything else by server.address.
- Tags: the span's attributes as they are (strings), plus Zipkin's "error" tag on a span whose
  status is ERROR, holding its error message, else its error type, else "true".
- shared is false: a client's span and the server's span of one exchange have ids of their
  own, the server's a child of the client's (Zipkin's v2 model, not B3's shared span ids).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from zerotrace import names
from zerotrace.errors import PoisonInput

KIND_CLIENT = "CLIENT"
KIND_SERVER = "SERVER"
CLIENT_SUFFIX = ".client"
SERVER_SUFFIX = ".server"
# Zipkin's tag that marks a failed span (zipkin2.TagsKeys / the UI's red spans).
ERROR_TAG = "error"
STATUS_ERROR = "ERROR"
NS_PER_US = 1_000
_TRACE_ID = re.compile(r"[0-9a-f]{32}|[0-9a-f]{16}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
# Attributes that name a remote end nobody observed, in order (module docstring).
_REMOTE_NAMES = (
    names.ATTR_DB_SYSTEM_NAME,
    names.ATTR_MESSAGING_SYSTEM,
    names.ATTR_SERVER_ADDRESS,
)


def zipkin_kind(kind: str) -> str | None:
    if kind.endswith(CLIENT_SUFFIX):
        return KIND_CLIENT
    if kind.endswith(SERVER_SUFFIX):
        return KIND_SERVER
    return None


def endpoint(
    address: str | None, port: str | int | None, service: str | None = None
) -> dict[str, Any] | None:
    """A Zipkin endpoint: serviceName, ipv4 or ipv6 (an IPv4-mapped IPv6 address as ipv4),
    port. A field that cannot be written (a host name where an IP goes, port 0) is left out;
    None when nothing is left."""
    out: dict[str, Any] = {}
    if service:
        out["serviceName"] = service
    ip = _ip(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        out["ipv4"] = str(ip)
    elif isinstance(ip, ipaddress.IPv6Address):
        out["ipv6"] = ip.compressed
    number = _port(port)
    if number is not None:
        out["port"] = number
    return out or None


def remote_service(attributes: Mapping[str, str]) -> str | None:
    """What a client span's remote end is called when nobody observed it (module docstring)."""
    for key in _REMOTE_NAMES:
        value = str(attributes.get(key) or "").strip()
        if value:
            return value
    return None


def microseconds(start_ns: int, end_ns: int) -> tuple[int, int]:
    """(timestamp, duration) in µs: start rounded down, end rounded up, duration at least 1."""
    start_us = start_ns // NS_PER_US
    end_us = -(-end_ns // NS_PER_US)
    return start_us, max(end_us - start_us, 1)


def zipkin_span(span: Mapping[str, Any]) -> dict[str, Any]:
    """One linked span document as a Zipkin v2 span; PoisonInput for malformed ids."""
    trace_id = str(span.get("trace_id") or "").lower()
    span_id = str(span.get("span_id") or "").lower()
    parent_id = str(span.get("parent_span_id") or "").lower()
    if not _TRACE_ID.fullmatch(trace_id) or not _SPAN_ID.fullmatch(span_id):
        raise PoisonInput(f"span {span_id or '?'}: ids are not Zipkin's hex ids")
    if parent_id and (not _SPAN_ID.fullmatch(parent_id) or parent_id == span_id):
        raise PoisonInput(f"span {span_id}: parent id {parent_id!r} is not a Zipkin span id")
    attributes = {str(k): str(v) for k, v in (span.get("attributes") or {}).items()}
    kind = zipkin_kind(str(span.get("kind") or ""))
    timestamp, duration = microseconds(int(span["start_ns"]), int(span["end_ns"]))
    out: dict[str, Any] = {"traceId": trace_id, "id": span_id}
    if parent_id:
        out["parentId"] = parent_id
    if kind is not None:
        out["kind"] = kind
    out["name"] = str(span.get("name") or span.get("kind") or "")
    out["timestamp"] = timestamp
    out["duration"] = duration
    client = (attributes.get(names.ATTR_CLIENT_ADDRESS), attributes.get(names.ATTR_CLIENT_PORT))
    server = (attributes.get(names.ATTR_SERVER_ADDRESS), attributes.get(names.ATTR_SERVER_PORT))
    local, remote = (client, server) if kind == KIND_CLIENT else (server, client)
    service = str(span.get("service") or "") or None
    if kind is None:  # a local span: no connection, only the process
        out["localEndpoint"] = {"serviceName": service} if service else None
    else:
        out["localEndpoint"] = endpoint(*local, service)
        named = remote_service(attributes) if kind == KIND_CLIENT else None
        out["remoteEndpoint"] = endpoint(*remote, named)
    if str(span.get("status") or "").upper() == STATUS_ERROR:
        attributes[ERROR_TAG] = (
            attributes.get(names.ATTR_ERROR_MESSAGE)
            or attributes.get(names.ATTR_ERROR_TYPE)
            or "true"
        )
    if attributes:
        out["tags"] = dict(sorted(attributes.items()))
    out["shared"] = False
    return {key: value for key, value in out.items() if value is not None}


def encode(spans: Iterable[Mapping[str, Any]]) -> bytes:
    """A POST /api/v2/spans body: the spans (already mapped) as a JSON list."""
    return json.dumps(list(spans), separators=(",", ":"), ensure_ascii=False).encode()


def _ip(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = str(address or "").strip().split("%", 1)[0]  # no zone index: Zipkin refuses one
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _port(port: str | int | None) -> int | None:
    try:
        number = int(str(port))
    except ValueError:
        return None
    return number if 0 < number < 65536 else None
