"""Huawei Ascend NPUs' readings from ``npu-smi`` text into
:class:`~zerotrace_collector.gpu_devices.DeviceSample` (pure: text in, samples out).

``npu-smi info`` prints a table: per chip two rows, the first ``NPU  Name | Health |
Power(W) Temp(C) Hugepages-Usage(page)``, the second ``Chip [Phy-ID|Device] | Bus-Id |
AICore(%) Memory-Usage(MB) [HBM-Usage(MB)]``, then a process table. The column names are read
from the table's own header, so the layouts of several driver releases parse alike (recorded
in tests/fixtures/npu_smi): 910B with ``Chip`` alone (23.0), 910 A3 with ``Chip Phy-ID`` and
two chips per NPU whose second prints ``-`` for power (25.x), 310P with ``Chip Device`` and
DDR memory instead of HBM. ``npu-smi info -t TYPE -i N`` (usages, power, temp, memory,
common, ecc) prints ``Key : value`` lines per chip; :func:`parse_detail` reads any of them and
:data:`DETAIL_FIELDS` says which key fills which field.

What Ascend gives, by DCGM name: AI Core use is GPU_UTIL, HBM bandwidth use MEM_COPY_UTIL,
chip temperature GPU_TEMP, HBM temperature MEMORY_TEMP, power POWER_USAGE, the AI Core clock
SM_CLOCK, the HBM clock MEM_CLOCK, HBM (DDR on 310P) used and total FB_USED/FB_TOTAL (free is
their difference), HBM single/double bit errors ECC_*. Gaps: encoder/decoder use, energy,
PCIe counters and replays, FB reserved, HCCS (the NVLink fields), remapped rows, clock event
reasons, XIDs. Health (OK, Warning, Alarm, Critical) has no DCGM field: it is the sample's
``health``, the record's vendor verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from zerotrace_collector.gpu_devices import DeviceInfo, DeviceSample, ProcessGpuUse, SampleBuilder
from zerotrace_collector.smi_values import MIB, SmiOutputError, number

__all__ = [
    "DETAIL_FIELDS",
    "NpuChip",
    "NpuDetail",
    "chip_samples",
    "parse_detail",
    "parse_info",
]

TOOL = "npu-smi"
# `npu-smi info -t ...` keys -> the GpuDeviceMetrics field; the several spellings are
# releases' and chips' (910B prints "NPU Real-time Power(W)", older 910 "Power Dissipation(W)").
DETAIL_FIELDS: Mapping[str, str] = {
    "aicore usage rate(%)": "gpu_util_pct",
    "hbm bandwidth usage rate(%)": "mem_copy_util_pct",
    "ddr bandwidth usage rate(%)": "mem_copy_util_pct",
    "npu real-time power(w)": "power_w",
    "power dissipation(w)": "power_w",
    "power(w)": "power_w",
    "temperature(c)": "temperature_c",
    "npu temperature(c)": "temperature_c",
    "chip temperature(c)": "temperature_c",
    "hbm temperature(c)": "memory_temp_c",
    "aicore curfreq(mhz)": "sm_clock_mhz",
    "hbm clock speed(mhz)": "mem_clock_mhz",
    "hbm single bit error count": "ecc_sbe_vol_total",
    "hbm double bit error count": "ecc_dbe_vol_total",
    "hbm single bit aggregate total err cnt": "ecc_sbe_agg_total",
    "hbm double bit aggregate total err cnt": "ecc_dbe_agg_total",
}
_INTEGER_FIELDS = frozenset(
    {
        "memory_temp_c",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "ecc_sbe_vol_total",
        "ecc_dbe_vol_total",
        "ecc_sbe_agg_total",
        "ecc_dbe_agg_total",
    }
)
_CAPACITY_KEYS = ("hbm capacity(mb)", "ddr capacity(mb)")
_USAGE_RATE_KEYS = ("hbm usage rate(%)", "ddr usage rate(%)")
_USED_TOTAL = re.compile(r"(\d+)\s*/\s*(\d+)")
_NO_PROCESS = re.compile(r"no running processes found in npu\s+(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class NpuChip:
    """One chip of the ``npu-smi info`` table; None where the table prints ``-`` or ``NA``."""

    npu: int
    chip: int
    phy_id: int | None  # "Phy-ID" or "Device": the chip's logic id across the node
    name: str
    health: str
    bus_id: str
    power_w: float | None
    temp_c: float | None
    aicore_pct: float | None
    memory_used_mib: int | None  # HBM where the table has it, else the chip's DDR (310P)
    memory_total_mib: int | None
    processes: tuple[ProcessGpuUse, ...] = ()


@dataclass(frozen=True)
class NpuDetail:
    """One chip's ``Key : value`` lines of ``npu-smi info -t TYPE -i NPU``."""

    npu: int
    chip: int
    values: Mapping[str, str] = field(default_factory=dict)  # keys lower-cased


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tokens(cell: str) -> list[str]:
    """A cell's values, a ``used / total`` pair kept as one."""
    return _USED_TOTAL.sub(r"\1/\2", cell).split()


def parse_info(text: str) -> list[NpuChip]:
    """The chips of ``npu-smi info``, with their processes from the table below them."""
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if re.match(r"^\|\s*NPU\s+Name\b", ln)), None)
    if head is None or head + 1 >= len(lines):
        raise SmiOutputError(f"{TOOL} info: no 'NPU Name | Health' header (not npu-smi output?)")
    first_names = [_tokens(c) for c in _cells(lines[head])]
    second_names = [_tokens(c) for c in _cells(lines[head + 1])]
    if len(first_names) < 3 or len(second_names) < 3:
        raise SmiOutputError(f"{TOOL} info: the header has fewer than three columns")
    rows: list[list[str]] = []
    i = head + 2
    while i < len(lines):
        ln = lines[i]
        if re.match(r"^\|\s*NPU\s+Chip\s*\|", ln):  # the process table begins
            break
        if ln.startswith("|") and not ln.startswith("|="):
            rows.append(_cells(ln))
        i += 1
    if len(rows) % 2:
        raise SmiOutputError(f"{TOOL} info: a chip's second row is missing (truncated output?)")
    chips = [_chip(rows[k], rows[k + 1], first_names, second_names) for k in range(0, len(rows), 2)]
    procs = _processes(lines[i:])
    return [replace(c, processes=procs.get((c.npu, c.chip), ())) for c in chips]


def _named(cell: str, names: Sequence[str]) -> dict[str, str]:
    values = _tokens(cell)
    return {n.lower(): v for n, v in zip(names, values, strict=False)}


def _chip(
    first: list[str],
    second: list[str],
    first_names: list[list[str]],
    second_names: list[list[str]],
) -> NpuChip:
    if len(first) < 3 or len(second) < 3:
        raise SmiOutputError(f"{TOOL} info: a chip row has fewer than three columns")
    id_cell, ids = first[0].split(), second[0].split()
    if len(id_cell) < 2 or not id_cell[0].isdigit() or not ids or not ids[0].isdigit():
        raise SmiOutputError(f"{TOOL} info: a chip row without its NPU and chip ids: {first[0]!r}")
    top = _named(first[2], first_names[2])
    bottom = _named(second[2], second_names[2])
    memory = bottom.get("hbm-usage(mb)") or bottom.get("memory-usage(mb)")
    used, total = _used_total(memory)
    return NpuChip(
        npu=int(id_cell[0]),
        chip=int(ids[0]),
        phy_id=int(ids[1]) if len(ids) > 1 and ids[1].isdigit() else None,
        name=" ".join(id_cell[1:]),
        health=first[1],
        bus_id=second[1],
        power_w=number(top.get("power(w)")),
        temp_c=number(top.get("temp(c)")),
        aicore_pct=number(bottom.get("aicore(%)")),
        memory_used_mib=used,
        memory_total_mib=total,
    )


def _used_total(pair: str | None) -> tuple[int | None, int | None]:
    m = _USED_TOTAL.fullmatch(pair or "")
    if not m or int(m.group(2)) == 0:  # "0 / 0": the table's way of saying none
        return None, None
    return int(m.group(1)), int(m.group(2))


def _processes(lines: Sequence[str]) -> dict[tuple[int, int], tuple[ProcessGpuUse, ...]]:
    """``| NPU Chip | Process id | Process name | Process memory(MB) |`` rows."""
    out: dict[tuple[int, int], list[ProcessGpuUse]] = {}
    for ln in lines:
        if not ln.startswith("|") or _NO_PROCESS.search(ln):
            continue
        cells = _cells(ln)
        ids = cells[0].split() if cells else []
        if len(cells) < 4 or len(ids) != 2 or not all(x.isdigit() for x in ids):
            continue
        if not cells[1].isdigit():
            continue
        mib = number(cells[3])
        used = int(mib * MIB) if mib is not None else None
        out.setdefault((int(ids[0]), int(ids[1])), []).append(ProcessGpuUse(int(cells[1]), used))
    return {k: tuple(sorted(v, key=lambda p: p.pid)) for k, v in out.items()}


def parse_detail(text: str) -> list[NpuDetail]:
    """``npu-smi info -t TYPE -i N``: ``NPU ID``, ``Chip Count``, then per chip its keys with
    a ``Chip ID`` line. Releases put ``Chip ID`` after a chip's values (most) or before them;
    which one is told by whether a value comes before the first ``Chip ID``. An output with
    one chip and no ``Chip ID`` line is chip 0."""
    pairs = []
    for ln in text.splitlines():
        if ":" not in ln:
            continue
        key, _, value = ln.partition(":")
        pairs.append((key.strip().lower(), value.strip()))
    npu_ids = [v for k, v in pairs if k == "npu id"]
    if not npu_ids or not npu_ids[0].isdigit():
        raise SmiOutputError(f"{TOOL} info -t: no 'NPU ID : N' line (not npu-smi output?)")
    npu = int(npu_ids[0])
    body = [(k, v) for k, v in pairs if k not in ("npu id", "chip count")]
    chip_first = bool(body) and body[0][0] == "chip id"
    chips: dict[int, dict[str, str]] = {}
    pending: dict[str, str] = {}
    current: int | None = None
    for key, value in body:
        if key == "chip id":
            if not value.isdigit():
                raise SmiOutputError(f"{TOOL} info -t: 'Chip ID' is not a number: {value!r}")
            if chip_first:
                current = int(value)
                chips.setdefault(current, {})
            else:
                chips.setdefault(int(value), {}).update(pending)
                pending = {}
        elif chip_first and current is not None:
            chips[current][key] = value
        else:
            pending[key] = value
    if pending:  # values after the last Chip ID, or no Chip ID at all
        chips.setdefault(0 if not chips else max(chips), {}).update(pending)
    return [NpuDetail(npu, chip, values) for chip, values in sorted(chips.items())]


def chip_samples(
    chips: Sequence[NpuChip],
    ts_ns: int,
    details: Sequence[NpuDetail] = (),
) -> list[DeviceSample]:
    """One sample per chip: the table's values, with the details' where the table has none
    (HBM bandwidth, clocks, HBM temperature, ECC) and the details' power where the table
    prints ``-``. A chip is indexed by its Phy-ID where the table gives one, else by its
    order; its id is its PCI address."""
    extra: dict[tuple[int, int], dict[str, str]] = {}
    for d in details:
        extra.setdefault((d.npu, d.chip), {}).update(d.values)
    samples = []
    for order, c in enumerate(chips):
        index = c.phy_id if c.phy_id is not None else order
        b = SampleBuilder(DeviceInfo(index, c.bus_id, _model(c.name)), ts_ns)
        more = extra.get((c.npu, c.chip), {})
        for key, value in more.items():
            name = DETAIL_FIELDS.get(key)
            v = number(value)
            if name is not None and v is not None:
                b.put(name, int(v) if name in _INTEGER_FIELDS else v)
        for name, v in (
            ("gpu_util_pct", c.aicore_pct),
            ("power_w", c.power_w),
            ("temperature_c", c.temp_c),
        ):
            if v is not None:
                b.put(name, v)
        used, total = c.memory_used_mib, c.memory_total_mib
        if total is None:
            used, total = _from_rate(more)
        if used is not None and total is not None:
            b.put("fb_used_bytes", used * MIB)
            b.put("fb_total_bytes", total * MIB)
            b.put("fb_free_bytes", (total - used) * MIB)
        b.processes = c.processes
        b.health = c.health
        samples.append(b.build())
    return samples


def _from_rate(values: Mapping[str, str]) -> tuple[int | None, int | None]:
    """HBM used from ``-t usages`` (capacity and a whole-percent rate) when the table has
    none: exact only to 1% of the capacity, so the table is preferred."""
    for cap_key, rate_key in zip(_CAPACITY_KEYS, _USAGE_RATE_KEYS, strict=True):
        cap, rate = number(values.get(cap_key)), number(values.get(rate_key))
        if cap:
            return (int(cap * rate / 100) if rate is not None else None), int(cap)
    return None, None


def _model(name: str) -> str:
    """The table's name as a model: ``910B3`` and ``310P3`` are printed without the family."""
    return name if name.lower().startswith("ascend") else f"Ascend {name}"
