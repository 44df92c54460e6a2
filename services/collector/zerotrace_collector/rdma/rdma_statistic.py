"""Output of iproute2's `rdma statistic` -> counters per port and per QP counter set (pure).

`rdma statistic qp show` lists the QP counter sets of every port: each set (cntn) counts the
queue pairs bound to it, in the kernel's auto mode one set per process (`rdma statistic qp
set link DEV/PORT auto pid on`) or per QP type, so its counters are per process. Each set
names its port, its QP type, its process (pid and comm; a kernel consumer has no pid and its
comm is shown in brackets) and the local QP numbers it counts. `rdma statistic show` lists
each port's default counters (the same as sysfs hw_counters).

Both forms are read: JSON (`rdma -j ...`, preferred: keys ifname, port, cntn, qp-type, pid,
comm, lqpn and one key per counter) and text, as rdma/stat.c prints it:

    link mlx5_2/1 cntn 4 qp-type RC pid 30489 comm ib_write_bw rx_write_requests 0 ...
        LQPN: <178,179>
    link mlx5_2/1 rx_write_requests 0 rx_read_requests 0 ...

(with -p each counter on a line of its own; the tokens are the same). Counter names are the
driver's, as in hw_counters (counter_names.py normalises them). Input that is not this shape
raises ValueError with one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Keys of a QP counter set that are not counters.
_QP_FIELDS = frozenset(("ifindex", "ifname", "port", "cntn", "qp-type", "pid", "comm", "lqpn"))


@dataclass(frozen=True)
class PortStatistic:
    device: str
    port: int
    counters: dict[str, int]


@dataclass(frozen=True)
class QpCounterSet:
    device: str
    port: int
    counter_id: int  # cntn
    qp_type: str | None
    pid: int | None  # None for a kernel consumer
    comm: str | None  # the process name, or the kernel consumer's name
    qpns: tuple[int, ...]  # the local QP numbers it counts
    counters: dict[str, int] = field(default_factory=dict)


def parse_qp_statistic(text: str) -> list[QpCounterSet]:
    """`rdma [-j] [-p] statistic qp show` output, JSON or text."""
    return [_qp_set(item) for item in _items(text)]


def parse_port_statistic(text: str) -> list[PortStatistic]:
    """`rdma [-j] [-p] statistic show` output, JSON or text."""
    out = []
    for item in _items(text):
        device, port = _link(item)
        counters = {k: _int(k, v) for k, v in item.items() if k not in _QP_FIELDS}
        out.append(PortStatistic(device, port, counters))
    return out


def _items(text: str) -> list[dict[str, Any]]:
    stripped = text.strip()
    if not stripped:
        return []
    if stripped[0] in "[{":
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"rdma statistic output is not valid JSON: {exc.msg}") from None
        items = loaded if isinstance(loaded, list) else [loaded]
        if not all(isinstance(item, dict) for item in items):
            raise ValueError("rdma statistic JSON is not a list of objects")
        return items
    return _text_items(stripped.split())


def _text_items(tokens: list[str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    at = 0
    while at < len(tokens):
        if tokens[at] != "link" or at + 1 >= len(tokens):
            raise ValueError(f"rdma statistic text: expected 'link DEV/PORT' at {tokens[at]!r}")
        device, _, port = tokens[at + 1].partition("/")
        item: dict[str, Any] = {"ifname": device, "port": port}
        at += 2
        while at < len(tokens) and tokens[at] != "link":
            name = tokens[at]
            if name == "LQPN:":
                listed = tokens[at + 1] if at + 1 < len(tokens) else "<>"
                item["lqpn"] = [int(q) for q in listed.strip("<>").split(",") if q]
                at += 2
                continue
            if at + 1 >= len(tokens):
                raise ValueError(f"rdma statistic text: {name!r} has no value")
            item[name] = tokens[at + 1]  # numbers are read by _int, as JSON's are
            at += 2
        items.append(item)
    return items


def _link(item: dict[str, Any]) -> tuple[str, int]:
    device = item.get("ifname")
    if not isinstance(device, str):
        raise ValueError("rdma statistic entry without a device name")
    return device, _int("port", item.get("port", 0))


def _qp_set(item: dict[str, Any]) -> QpCounterSet:
    device, port = _link(item)
    pid = item.get("pid")
    comm = item.get("comm")
    if isinstance(comm, str) and pid is None and comm.startswith("[") and comm.endswith("]"):
        comm = comm[1:-1]  # the text form brackets a kernel consumer's name
    return QpCounterSet(
        device=device,
        port=port,
        counter_id=_int("cntn", item.get("cntn", 0)),
        qp_type=str(item["qp-type"]) if "qp-type" in item else None,
        pid=None if pid is None else _int("pid", pid),
        comm=None if comm is None else str(comm),
        qpns=tuple(_int("lqpn", q) for q in item.get("lqpn", [])),
        counters={k: _int(k, v) for k, v in item.items() if k not in _QP_FIELDS},
    )


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"rdma statistic: {name} is not a number")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"rdma statistic: {name} is not a number: {value!r}") from None
