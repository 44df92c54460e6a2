"""AMD GPUs' readings from the ``amd-smi`` CLI's JSON (and the older ``rocm-smi``'s) into
:class:`~zerotrace_collector.gpu_devices.DeviceSample` (pure: text in, samples out).

Formats read (recorded outputs in tests/fixtures/amd_smi, with where each came from):

- amd-smi of ROCm 6.0: a JSON list, one object per GPU (``"gpu": N``), values plain numbers;
- ROCm 6.1 to 6.3: the same list, each value a ``{"value": .., "unit": ..}`` object;
- ROCm 6.4 on: ``static`` and ``metric`` wrapped in ``{"gpu_data": [...]}`` (``process`` and
  ``list`` stay lists); a value the GPU lacks is the string ``"N/A"`` in all of them;
- ``rocm-smi --showallinfo --json`` (ROCm 5.x, before amd-smi): ``{"card0": {"GPU use (%)":
  "0", ...}}``, every value a string.

What AMD gives, by the DCGM name (gpu_devices.DCGM_FIELDS) it fills: GFX activity is GPU_UTIL,
UMC (memory controller) activity MEM_COPY_UTIL, the mean of the VCN engines' activity DEC_UTIL
(VCN only decodes on Instinct parts), the hotspot (junction) temperature GPU_TEMP (the edge
sensor where there is no hotspot: MI300X reports no edge), the HBM sensor MEMORY_TEMP, socket
power POWER_USAGE, the energy accumulator TOTAL_ENERGY_CONSUMPTION, the first GFX domain's
clock SM_CLOCK, VRAM total/used/free FB_*, PCIe replays, RAS correctable and uncorrectable
counts ECC_SBE/DBE_VOL_TOTAL, and the MI300 violation statuses (PPT, thermal, PROCHOT) as the
NVML clock event bits they mean. Never given (gaps): encoder use (Instinct has none), PCIe
byte counters (MI3xx counts both directions together), FB reserved, lifetime ECC, XGMI
(the NVLink fields), row remapping (AMD retires pages instead), XIDs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zerotrace_collector.gpu_devices import DeviceInfo, DeviceSample, ProcessGpuUse, SampleBuilder
from zerotrace_collector.nvml_readings import reason_names
from zerotrace_collector.smi_values import MIB, SmiOutputError, load_json, number, number_in

__all__ = [
    "VIOLATION_BITS",
    "AmdStatic",
    "devices_of",
    "metric_samples",
    "parse_list",
    "parse_process",
    "parse_rocm_smi",
    "parse_static",
]

TOOL = "amd-smi"
ROCM_SMI = "rocm-smi"
# MI300 violation statuses (amd-smi metric --throttle, ROCm 6.3 on) -> the NVML clocks event
# reason bit of the same cause (nvml_readings.CLOCKS_EVENT_REASONS).
VIOLATION_BITS: tuple[tuple[str, int], ...] = (
    ("ppt_violation_status", 0x4),  # package power tracking: SwPowerCap
    ("prochot_violation_status", 0x8),  # processor hot: HwSlowdown
    ("socket_thermal_violation_status", 0x20),  # SwThermalSlowdown
    ("vr_thermal_violation_status", 0x40),  # voltage regulator: HwThermalSlowdown
    ("hbm_thermal_violation_status", 0x40),
)
_ENERGY_TO_MJ = {"j": 1e3, "mj": 1.0, "uj": 1e-3, "μj": 1e-3}


@dataclass(frozen=True)
class AmdStatic:
    index: int
    model: str
    bdf: str | None
    serial: str | None


def _entries(data: object, tool: str, what: str) -> list[dict[str, object]]:
    """The per-GPU objects of a list, or of a ``{"gpu_data": [...]}`` wrapper (ROCm 6.4 on)."""
    if isinstance(data, dict) and "gpu_data" in data:
        data = data["gpu_data"]
    if not isinstance(data, list):
        raise SmiOutputError(f"{tool} {what}: expected a list of GPUs, got {type(data).__name__}")
    out = []
    for entry in data:
        if not isinstance(entry, dict) or not isinstance(entry.get("gpu"), int):
            raise SmiOutputError(f"{tool} {what}: a GPU entry without its 'gpu' index")
        out.append(entry)
    return out


def _text(value: object) -> str | None:
    if isinstance(value, str) and value.strip() and value.strip().upper() != "N/A":
        return value.strip()
    return None


def parse_static(text: str) -> dict[int, AmdStatic]:
    """``amd-smi static --json``: each GPU's model (ASIC market name), PCI address and serial."""
    out = {}
    for e in _entries(load_json(text, TOOL), TOOL, "static"):
        asic = e.get("asic") if isinstance(e.get("asic"), dict) else {}
        bus = e.get("bus") if isinstance(e.get("bus"), dict) else {}
        assert isinstance(asic, dict) and isinstance(bus, dict)
        model = _text(asic.get("market_name")) or "AMD GPU"
        index = int(str(e["gpu"]))
        out[index] = AmdStatic(index, model, _text(bus.get("bdf")), _text(asic.get("asic_serial")))
    return out


def parse_list(text: str) -> dict[int, str]:
    """``amd-smi list --json``: each GPU's UUID."""
    out = {}
    for e in _entries(load_json(text, TOOL), TOOL, "list"):
        uuid = _text(e.get("uuid"))
        if uuid:
            out[int(str(e["gpu"]))] = uuid
    return out


def devices_of(static: Mapping[int, AmdStatic], uuids: Mapping[int, str]) -> list[DeviceInfo]:
    """The GPUs, named by UUID where ``list`` gave one, else by serial or PCI address."""
    out = []
    for index in sorted(static):
        s = static[index]
        uuid = uuids.get(index) or s.serial or s.bdf or f"amd-gpu-{index}"
        out.append(DeviceInfo(index, uuid, s.model))
    return out


def parse_process(text: str) -> dict[int, tuple[ProcessGpuUse, ...]]:
    """``amd-smi process --json``: each GPU's processes with their VRAM. An entry is
    ``{"process_info": {...}}`` (ROCm 6.x) or the process object itself; "No running
    processes detected" in place of the object means none. AMD's per-process engine use is
    busy time in ns, not a share: the utilisation fields stay None."""
    out: dict[int, tuple[ProcessGpuUse, ...]] = {}
    for e in _entries(load_json(text, TOOL), TOOL, "process"):
        procs = []
        listed = e.get("process_list")
        for item in listed if isinstance(listed, list) else []:
            info = item.get("process_info", item) if isinstance(item, dict) else None
            if not isinstance(info, dict) or not isinstance(info.get("pid"), int):
                continue
            vram = number_in(info, "memory_usage", "vram_mem")
            used = int(vram * MIB) if vram is not None else None
            procs.append(ProcessGpuUse(int(info["pid"]), used))
        out[int(str(e["gpu"]))] = tuple(sorted(procs, key=lambda p: p.pid))
    return out


def metric_samples(
    text: str,
    devices: Sequence[DeviceInfo],
    ts_ns: int,
    processes: Mapping[int, tuple[ProcessGpuUse, ...]] | None = None,
) -> list[DeviceSample]:
    """``amd-smi metric --json`` of the *devices* (from ``static``), one sample each; a GPU in
    the metric output but not in *devices* is named by its index alone."""
    by_index = {d.index: d for d in devices}
    samples = []
    for e in _entries(load_json(text, TOOL), TOOL, "metric"):
        index = int(str(e["gpu"]))
        device = by_index.get(index) or DeviceInfo(index, f"amd-gpu-{index}", "AMD GPU")
        b = SampleBuilder(device, ts_ns)
        _put_metrics(b, e)
        b.processes = (processes or {}).get(index, ())
        samples.append(b.build())
    return samples


def _put(b: SampleBuilder, name: str, value: float | None, *, integer: bool = False) -> None:
    if value is not None:
        b.put(name, round(value) if integer else value)


def _put_metrics(b: SampleBuilder, e: Mapping[str, object]) -> None:
    _put(b, "gpu_util_pct", number_in(e, "usage", "gfx_activity"))
    _put(b, "mem_copy_util_pct", number_in(e, "usage", "umc_activity"))
    _put(b, "dec_util_pct", _decode_util(e.get("usage")))
    hotspot = number_in(e, "temperature", "hotspot")
    _put(
        b, "temperature_c", hotspot if hotspot is not None else number_in(e, "temperature", "edge")
    )
    _put(b, "memory_temp_c", number_in(e, "temperature", "mem"), integer=True)
    power = e.get("power")
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        watts = number_in(power, key)
        if watts is not None:
            b.put("power_w", watts)
            break
    _put(b, "total_energy_consumption_mj", _energy_mj(e.get("energy")), integer=True)
    _put(b, "sm_clock_mhz", _clock(e.get("clock"), "gfx"), integer=True)
    _put(b, "mem_clock_mhz", _clock(e.get("clock"), "mem"), integer=True)
    _put(b, "pcie_replay_counter", number_in(e, "pcie", "replay_count"), integer=True)
    _put(b, "ecc_sbe_vol_total", number_in(e, "ecc", "total_correctable_count"), integer=True)
    _put(b, "ecc_dbe_vol_total", number_in(e, "ecc", "total_uncorrectable_count"), integer=True)
    for name, key in (
        ("fb_total_bytes", "total_vram"),
        ("fb_used_bytes", "used_vram"),
        ("fb_free_bytes", "free_vram"),
    ):
        mib = number_in(e, "mem_usage", key)
        _put(b, name, mib * MIB if mib is not None else None, integer=True)
    mask = _clock_event_mask(e)
    if mask is not None:
        b.put("clocks_event_reasons", mask)
        b.reason_names = reason_names(mask)


def _decode_util(usage: object) -> float | None:
    if not isinstance(usage, dict):
        return None
    vcn = usage.get("vcn_activity")
    if isinstance(vcn, list):
        values = [v for v in (number(x) for x in vcn) if v is not None]
        return sum(values) / len(values) if values else None
    return number(usage.get("mm_activity"))


def _energy_mj(energy: object) -> float | None:
    if not isinstance(energy, dict):
        return None
    raw = energy.get("total_energy_consumption")
    value = number(raw)
    if value is None:
        return None
    unit = raw.get("unit") if isinstance(raw, dict) else None
    if isinstance(raw, str):
        unit = raw.strip().split()[-1] if len(raw.split()) > 1 else None
    scale = _ENERGY_TO_MJ.get(str(unit).lower(), 1e3) if unit else 1e3  # amd-smi prints J
    return value * scale


def _clock(clock: object, domain: str) -> float | None:
    """The first domain's current clock: ``gfx_0`` (one per XCD on MI300) or ``gfx``."""
    if not isinstance(clock, dict):
        return None
    for key in (f"{domain}_0", domain):
        node = clock.get(key)
        if isinstance(node, dict):
            for field in ("clk", "cur_clk"):
                mhz = number(node.get(field))
                if mhz is not None:
                    return mhz
    return None


def _active(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip().upper()
        if v in ("ACTIVE", "TRUE", "YES"):
            return True
        if v in ("NOT ACTIVE", "INACTIVE", "FALSE", "NO"):
            return False
    return None


def _clock_event_mask(e: Mapping[str, object]) -> int | None:
    """The violation statuses as NVML bits; without them, the power section's
    ``throttle_status`` says only throttled or not: UNTHROTTLED is 0, THROTTLED is a gap (the
    cause unknown)."""
    throttle = e.get("throttle")
    if isinstance(throttle, dict):
        known = False
        mask = 0
        for key, bit in VIOLATION_BITS:
            active = _active(throttle.get(key))
            if active is not None:
                known = True
                mask |= bit if active else 0
        if known:
            return mask
    power = e.get("power")
    status = power.get("throttle_status") if isinstance(power, dict) else None
    if isinstance(status, str) and status.strip().upper() == "UNTHROTTLED":
        return 0
    return None


# --- rocm-smi (ROCm 5.x) -------------------------------------------------------------------


def parse_rocm_smi(text: str, ts_ns: int) -> list[DeviceSample]:
    """``rocm-smi --showallinfo --json`` (also ``-a``): one sample per ``cardN``; the
    ``system`` object (driver version) is skipped. Keys are matched without regard to case:
    rocm-smi renamed ``Card series`` to ``Card Series`` between releases."""
    data = load_json(text, ROCM_SMI)
    if not isinstance(data, dict):
        raise SmiOutputError(f"{ROCM_SMI}: expected an object of cards, got {type(data).__name__}")
    cards = sorted(
        ((int(k[4:]), v) for k, v in data.items() if k.startswith("card") and k[4:].isdigit()),
        key=lambda kv: kv[0],
    )
    if not cards:
        raise SmiOutputError(f"{ROCM_SMI}: no 'cardN' object in the output")
    samples = []
    for index, raw in cards:
        if not isinstance(raw, dict):
            raise SmiOutputError(f"{ROCM_SMI}: card{index} is not an object")
        card = {str(k).strip().lower(): v for k, v in raw.items()}
        samples.append(_rocm_card(index, card, ts_ns))
    return samples


def _first(card: Mapping[str, object], *keys: str) -> float | None:
    for key in keys:
        value = number(card.get(key.lower()))
        if value is not None:
            return value
    return None


def _rocm_card(index: int, card: Mapping[str, object], ts_ns: int) -> DeviceSample:
    model = _text(card.get("card series")) or _text(card.get("device name")) or "AMD GPU"
    uuid = _text(card.get("unique id")) or _text(card.get("serial number")) or f"card{index}"
    b = SampleBuilder(DeviceInfo(index, uuid, model), ts_ns)
    _put(b, "gpu_util_pct", _first(card, "GPU use (%)"))
    _put(b, "mem_copy_util_pct", _first(card, "GPU memory use (%)"))
    _put(
        b,
        "temperature_c",
        _first(card, "Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)"),
    )
    _put(b, "memory_temp_c", _first(card, "Temperature (Sensor memory) (C)"), integer=True)
    _put(
        b,
        "power_w",
        _first(
            card,
            "Current Socket Graphics Package Power (W)",
            "Average Graphics Package Power (W)",
        ),
    )
    _put(b, "sm_clock_mhz", _first(card, "sclk clock speed:"), integer=True)
    _put(b, "mem_clock_mhz", _first(card, "mclk clock speed:"), integer=True)
    _put(b, "pcie_replay_counter", _first(card, "PCIe Replay Count"), integer=True)
    energy_uj = _first(card, "Accumulated Energy (uJ)")
    _put(
        b,
        "total_energy_consumption_mj",
        energy_uj / 1e3 if energy_uj is not None else None,
        integer=True,
    )
    total = _first(card, "VRAM Total Memory (B)")
    used = _first(card, "VRAM Total Used Memory (B)")
    _put(b, "fb_total_bytes", total, integer=True)
    _put(b, "fb_used_bytes", used, integer=True)
    if total is not None and used is not None:
        b.put("fb_free_bytes", int(total - used))
    return b.build()
