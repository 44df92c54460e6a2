"""`zerotrace analyze`'s table per protocol: the spans of every protocol besides HTTP (Redis,
PostgreSQL, Kafka, DNS, ...), newest last, one table each, with what a person looks for first:
when, how long, whether it failed, against which server, and the operation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from zerotrace import names

HEAD = ("TIME", "DURATION ms", "STATUS", "SERVER", "OPERATION")
# What best says what a span did, per protocol: the sanitized query for databases, the
# answers for DNS, the topic for Kafka; the span's name when none of them is there.
DETAIL_KEYS = (names.ATTR_DB_QUERY_TEXT, names.ATTR_DNS_ANSWERS, names.ATTR_MESSAGING_DESTINATION)
NOT_PROTOCOLS = {"http", "file"}


def protocol_of(span: Mapping[str, Any]) -> str:
    return str(span.get("kind", "")).split(".", 1)[0]


def render_protocol_tables(spans: Sequence[Mapping[str, Any]], rows: int = 30) -> list[str]:
    """A titled table per protocol (the last `rows` spans of each), protocols in name order."""
    by_protocol: dict[str, list[Mapping[str, Any]]] = {}
    for span in spans:
        protocol = protocol_of(span)
        if protocol and protocol not in NOT_PROTOCOLS:
            by_protocol.setdefault(protocol, []).append(span)
    out: list[str] = []
    for protocol in sorted(by_protocol):
        found = sorted(by_protocol[protocol], key=lambda s: int(s["start_ns"]))
        failed = sum(s.get("status") == "ERROR" for s in found)
        out.append(f"{protocol}: {len(found)} spans, {failed} failed")
        table = [HEAD] + [_row(s) for s in found[-rows:]]
        widths = [max(len(r[i]) for r in table) for i in range(len(HEAD) - 1)]
        for r in table:
            cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)]
            out.append("  ".join([*cells, r[-1]]).rstrip())
        out.append("")
    return out


def _row(span: Mapping[str, Any]) -> tuple[str, ...]:
    attrs: Mapping[str, Any] = span.get("attributes") or {}
    when = datetime.fromtimestamp(int(span["start_ns"]) / 1e9, UTC).strftime("%H:%M:%S.%f")[:-3]
    took = (int(span["end_ns"]) - int(span["start_ns"])) / 1e6
    status = (
        str(attrs.get(names.ATTR_ERROR_TYPE, "error")) if span.get("status") == "ERROR" else "ok"
    )
    server = f"{attrs.get(names.ATTR_SERVER_ADDRESS, '')}:{attrs.get(names.ATTR_SERVER_PORT, '')}"
    detail = next((str(attrs[k]) for k in DETAIL_KEYS if attrs.get(k)), "")
    operation = str(span.get("name", "")) + (
        f"  {detail}" if detail and detail != span.get("name") else ""
    )
    return (when, f"{took:.2f}", status, server, operation[:120])
