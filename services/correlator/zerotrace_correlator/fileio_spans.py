"""File operations as spans: one raw.fileio record -> one derived.span record. Pure."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace.service_identity import record_service


def stable_id(*parts: str, length: int = 16) -> str:
    """Hex id from its inputs only, so a replay of the same raw events yields the same ids."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[: length * 2]


def file_open_span(raw: Mapping[str, Any]) -> dict[str, Any]:
    result = int(raw["result"])
    attributes = {
        names.ATTR_FILE_PATH: raw["path"],
        names.ATTR_PROCESS_PID: str(raw["pid"]),
        names.ATTR_THREAD_ID: str(raw["tid"]),
        names.ATTR_PROCESS_NAME: raw["process_name"],
        names.ATTR_FILE_OPEN_FLAGS: hex(int(raw["flags"])),
    }
    if result < 0:
        attributes[names.ATTR_ERROR_TYPE] = errno.errorcode.get(-result, str(-result))
    else:
        attributes[names.ATTR_FILE_FD] = str(result)
    op = str(raw["op"]).lower()
    return {
        "span_id": stable_id("span", raw["event_id"], length=8),
        "trace_id": stable_id("trace", raw["event_id"], length=16),
        "parent_span_id": None,
        "node_id": raw["node_id"],
        "pid": raw["pid"],
        "tid": raw["tid"],
        "process_name": raw["process_name"],
        "container_id": raw.get("container_id"),
        "service": record_service(raw),
        "kind": names.SPAN_KIND_FILE_OPEN if op == "open" else f"file.{op}",
        "name": f"{op} {raw['path']}",
        "start_ns": raw["start_ns"],
        "end_ns": raw["end_ns"],
        "status": "OK" if result >= 0 else "ERROR",
        "attributes": attributes,
        "source_event_ids": [raw["event_id"]],
    }
