"""RDMA port counters from sysfs: a thin reader over /sys/class/infiniband (the one I/O here)
and the pure parse of one counter file.

    /sys/class/infiniband/DEV/ports/N/counters/NAME      IBA port counters (not on rxe)
    /sys/class/infiniband/DEV/ports/N/hw_counters/NAME   the driver's own counters

Each file holds one decimal number and a newline. Some cannot be read on some ports (mlx5
answers EINVAL for IB-only counters of a RoCE port, a counter may be unsupported by the
firmware): those are listed in `unreadable` and left out, never a failure. The root is a
parameter so tests read recorded trees; the time of the reading is the caller's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zerotrace_collector.rdma.counter_names import HW_DIR, PORT_DIR

DEFAULT_ROOT = Path("/sys/class/infiniband")


@dataclass(frozen=True)
class PortReading:
    device: str
    port: int
    ts_ns: int
    port_counters: dict[str, int]  # counters/, raw values (data counters in 4-byte units)
    hw_counters: dict[str, int]  # hw_counters/, raw values
    unreadable: tuple[str, ...] = ()  # "counters/NAME" files that gave no number


def parse_counter(text: str) -> int | None:
    """A counter file's text -> its value; None when it holds no unsigned number."""
    text = text.strip()
    return int(text) if text.isdigit() else None


def read_ports(ts_ns: int, root: Path = DEFAULT_ROOT) -> list[PortReading]:
    """Every port of every RDMA device under root, read now (ts_ns: the caller's clock).
    An absent root (no RDMA device, no ib_core) gives no readings."""
    if not root.is_dir():
        return []
    out = []
    for device in sorted(root.iterdir()):
        ports = device / "ports"
        if not ports.is_dir():
            continue
        for port in sorted((p for p in ports.iterdir() if p.name.isdigit()), key=_number):
            unreadable: list[str] = []
            counters = _read_dir(port / PORT_DIR, unreadable)
            hw = _read_dir(port / HW_DIR, unreadable)
            name = device.name
            out.append(PortReading(name, int(port.name), ts_ns, counters, hw, tuple(unreadable)))
    return out


def list_ports(root: Path = DEFAULT_ROOT) -> list[tuple[str, int]]:
    """(device, port) of every port under root, without reading a counter."""
    if not root.is_dir():
        return []
    out = []
    for device in sorted(root.iterdir()):
        ports = device / "ports"
        if ports.is_dir():
            numbered = sorted((p for p in ports.iterdir() if p.name.isdigit()), key=_number)
            out += [(device.name, int(p.name)) for p in numbered]
    return out


def _number(path: Path) -> int:
    return int(path.name)


def _read_dir(folder: Path, unreadable: list[str]) -> dict[str, int]:
    if not folder.is_dir():
        return {}
    values = {}
    for file in sorted(folder.iterdir()):
        if not file.is_file():
            continue
        try:
            value = parse_counter(file.read_text())
        except OSError:
            value = None
        if value is None:
            unreadable.append(f"{folder.name}/{file.name}")
        else:
            values[file.name] = value
    return values
