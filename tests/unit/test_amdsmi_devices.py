"""AMD GPUs through the `amdsmi` Python package (zerotrace_collector/amdsmi_devices.py), with
the stand-in package of tests/harness/amdsmi_standin imported as `amdsmi` from sys.path: the
scripted answers come out of the GPU metrics feed as exact record values, mapped by
amd_smi_parse as the CLI's are; a call the GPU does not support (AmdSmiLibraryException with
AMDSMI_STATUS_NOT_SUPPORTED) is a marked gap, another failure a failed field said once; the
package that does not import or start is one line; and --gpu-vendor amd prefers the package,
falls back to the CLI, and says which."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.amdsmi_standin import FOLDER, SCRIPT_ENV
from zerotrace.clock import ManualClock
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.amdsmi_devices import NO_AMDSMI, AmdSmiPackageDevices, import_amdsmi
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.gpu_devices import METRIC_FIELDS, DeviceInfo
from zerotrace_collector.gpu_devices_memory import InMemoryGpuDevices, ScriptedDevice
from zerotrace_collector.gpu_metrics_feed import GpuMetricsFeed
from zerotrace_collector.gpu_vendor import Candidate, VendorChoice

pytestmark = pytest.mark.unit

MIB = 1 << 20
T = 1_760_000_000_000_000_000
UUID0 = "8fff74a1-0000-1000-80e9-b6a8f6c62f4f"
NOT_SUPPORTED = {"status": 2}  # AMDSMI_STATUS_NOT_SUPPORTED
MI300X: dict[str, Any] = {
    "uuid": UUID0,
    "bdf": "0000:05:00.0",
    "asic": {"market_name": "AMD Instinct MI300X", "asic_serial": "0x1A2B"},
    "activity": {"gfx_activity": 87, "umc_activity": 41, "mm_activity": "N/A"},
    "temperature": {"edge": NOT_SUPPORTED, "hotspot": 71, "vram": 55},  # MI300X: no edge
    "power": {
        "socket_power": 734,
        "current_socket_power": 734,
        "average_socket_power": "N/A",
        "gfx_voltage": "N/A",
        "soc_voltage": "N/A",
        "mem_voltage": "N/A",
        "power_limit": 750,
    },
    "energy": {"energy_accumulator": 902_110_000, "counter_resolution": 15.3, "timestamp": 1},
    "clock": {
        "gfx": {"clk": 2100, "min_clk": 500, "max_clk": 2100, "clk_locked": False},
        "mem": {"clk": 1300, "min_clk": 900, "max_clk": 1300, "clk_locked": False},
    },
    "ecc": {"correctable_count": 12, "uncorrectable_count": 0, "deferred_count": 0},
    "vram": {"vram_total": 196592, "vram_used": 4976},
    "processes": [
        {
            "name": "python3",
            "pid": 2427396,
            "mem": 4294967296,
            "engine_usage": {"gfx": 1000, "enc": 0},
            "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": 4294967296},
            "cu_occupancy": "N/A",
        }
    ],
}
# A second GPU: power NOT_SUPPORTED (a gap), the ECC read failing otherwise (failed, said
# once), no processes.
SECOND: dict[str, Any] = {
    **MI300X,
    "uuid": "c4ff74a1-0000-1000-8046-2d1a6c0b9e33",
    "power": NOT_SUPPORTED,
    "ecc": {"status": 7},  # AMDSMI_STATUS_API_FAILED
    "processes": [],
}


def write_script(path: Path, **script: Any) -> None:
    path.write_text(json.dumps({"init": None, "driver_version": "6.8.5", **script}))


def _amdsmi_modules() -> list[str]:
    return [m for m in sys.modules if m == "amdsmi" or m.startswith("amdsmi.")]


@pytest.fixture(autouse=True)
def no_amdsmi_left_behind() -> Iterator[None]:
    """A test that imports a stand-in `amdsmi` takes it out of sys.modules again: left there,
    every later test's auto vendor choice would find a package that cannot start."""
    before = {name: sys.modules[name] for name in _amdsmi_modules()}
    yield
    for name in _amdsmi_modules():
        del sys.modules[name]
    sys.modules.update(before)


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`import amdsmi` finds the stand-in; returns the script's path (two GPUs written)."""
    monkeypatch.syspath_prepend(str(FOLDER))
    for name in _amdsmi_modules():
        monkeypatch.delitem(sys.modules, name)
    script = tmp_path / "amdsmi.json"
    write_script(script, gpus=[MI300X, SECOND])
    monkeypatch.setenv(SCRIPT_ENV, str(script))
    return script


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for thing in opened:
        thing.close()


def first_tick(feed: GpuMetricsFeed, count: int) -> list[RawRecord]:
    out: list[RawRecord] = []
    deadline = time.monotonic() + 20.0
    while len(out) < count and time.monotonic() < deadline:
        out += feed.poll(50)
    return out


def amd_candidates(lines: list[str], cli_devices: list[DeviceInfo]) -> list[Candidate]:
    """The package's candidate (real import of the stand-in) and the CLI's (in memory)."""
    cli = InMemoryGpuDevices([ScriptedDevice(d, {"gpu_util_pct": 5}) for d in cli_devices])
    cli.vendor = "amd"
    return [
        Candidate(
            "amd",
            "AMD GPUs through the amdsmi package",
            NO_AMDSMI,
            "no amdsmi Python package",
            lambda: AmdSmiPackageDevices(note=lines.append),
        ),
        Candidate("amd", "AMD GPUs through amd-smi", "no amd-smi", "no amd-smi", lambda: cli),
    ]


def test_the_feed_gives_the_packages_exact_values_and_a_not_supported_gap(
    standin: Path, closing: list[Any]
) -> None:
    lines: list[str] = []
    source = VendorChoice("amd", amd_candidates(lines, []), note=lines.append)
    feed = GpuMetricsFeed(source, "node-a", ManualClock(T), interval_s=0.2, note=lines.append)
    closing.append(feed)
    feed.attach()
    d0, d1 = (r.datum for r in first_tick(feed, 2))
    assert (d0["vendor"], d0["node_id"], d0["device_uuid"]) == ("amd", "node-a", UUID0)
    assert (d0["model"], d0["driver_version"]) == ("AMD Instinct MI300X", "6.8.5")
    assert {k: d0[k] for k in ("gpu_util_pct", "mem_copy_util_pct", "temperature_c")} == {
        "gpu_util_pct": 87.0,
        "mem_copy_util_pct": 41.0,
        "temperature_c": 71.0,  # the hotspot: the edge sensor NOT_SUPPORTED
    }
    assert (d0["memory_temp_c"], d0["power_w"], d0["sm_clock_mhz"]) == (55, 734.0, 2100)
    assert d0["mem_clock_mhz"] == 1300
    # 902110000 x 15.3 uJ = 13802283000 uJ = 13802283 mJ
    assert d0["total_energy_consumption_mj"] == round(902_110_000 * 15.3 * 1e-3)
    assert (d0["ecc_sbe_vol_total"], d0["ecc_dbe_vol_total"]) == (12, 0)
    assert (d0["fb_total_bytes"], d0["fb_used_bytes"]) == (196592 * MIB, 4976 * MIB)
    assert d0["fb_free_bytes"] == (196592 - 4976) * MIB
    assert d0["memory_used_bytes"] == 4976 * MIB
    assert [(p["pid"], p["used_memory_bytes"]) for p in d0["processes"]] == [(2427396, 4294967296)]
    assert d0["dec_util_pct"] is None and "dec_util_pct" in d0["unsupported"]  # "N/A"
    assert d0["failed"] == [] and d0["health"] is None
    assert d1["power_w"] is None and "power_w" in d1["unsupported"]  # NOT_SUPPORTED: a gap
    assert d1["failed"] == ["ecc_sbe_vol_total", "ecc_dbe_vol_total"]
    assert d1["ecc_sbe_vol_total"] is None and "ecc_sbe_vol_total" not in d1["unsupported"]
    assert d1["gpu_util_pct"] == 87.0 and d1["processes"] == []
    assert lines == [
        "GPU metrics: AMD GPUs through the amdsmi package: 2 x AMD Instinct MI300X",
        "amdsmi ecc read failed (AMDSMI_STATUS_API_FAILED - API call failed)",
    ]
    assert feed.counters()["amdsmi_errors"] == 1


def test_every_field_the_package_does_not_read_is_a_gap(standin: Path) -> None:
    source = AmdSmiPackageDevices()
    [device, _] = source.open()
    sample = source.sample(device, T)
    source.close()
    read = {n for n, v in sample.metrics.items() if v is not None}
    assert read == {
        "gpu_util_pct",
        "mem_copy_util_pct",
        "temperature_c",
        "memory_temp_c",
        "power_w",
        "total_energy_consumption_mj",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "ecc_sbe_vol_total",
        "ecc_dbe_vol_total",
        "fb_total_bytes",
        "fb_used_bytes",
        "fb_free_bytes",
    }
    assert set(sample.unsupported) == set(METRIC_FIELDS) - read
    assert device == DeviceInfo(0, UUID0, "AMD Instinct MI300X")


def test_no_package_falls_back_to_the_cli_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, closing: list[Any]
) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # `import amdsmi` raises ImportError
    with pytest.raises(FeatureUnavailable, match=f"^{re.escape(NO_AMDSMI)}$"):
        import_amdsmi()
    lines: list[str] = []
    source = VendorChoice("amd", amd_candidates(lines, [DeviceInfo(0, "u", "MI250")]))
    closing.append(source)
    source.open()
    assert source.notes == ["GPU metrics: AMD GPUs through amd-smi: 1 x MI250"]


def test_a_package_that_does_not_start_is_passed_over_by_name(
    standin: Path, closing: list[Any]
) -> None:
    write_script(standin, init=10, gpus=[])  # AMDSMI_STATUS_NO_PERM
    lines: list[str] = []
    source = VendorChoice("amd", amd_candidates(lines, [DeviceInfo(0, "u", "MI250")]))
    closing.append(source)
    source.open()
    assert source.notes == [
        "GPU metrics: AMD GPUs through amd-smi: 1 x MI250; passed over: amdsmi did not start "
        "(AMDSMI_STATUS_NO_PERM - Permission Denied)"
    ]


def test_neither_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    lines: list[str] = []
    candidates = amd_candidates(lines, [])
    absent = Candidate("amd", "AMD GPUs through", "gone", "no amd-smi or rocm-smi on PATH", _gone)
    with pytest.raises(FeatureUnavailable) as raised:
        VendorChoice("amd", [candidates[0], absent]).open()
    assert str(raised.value) == (
        "GPU metrics (--gpu-vendor amd): no amdsmi Python package, "
        "no amd-smi or rocm-smi on PATH: skipped"
    )


def _gone() -> Any:
    class Gone(InMemoryGpuDevices):
        def open(self) -> list[DeviceInfo]:
            raise FeatureUnavailable("gone")

    return Gone([])


def test_the_real_wheel_without_its_library_is_not_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The PyPI wheel's wrapper prints and raises KeyError without libamd_smi.so: a
    package laid out that way is "not there", and nothing reaches stdout."""
    package = tmp_path / "amdsmi"
    package.mkdir()
    (package / "__init__.py").write_text(
        "print('Could not load libamd_smi.so')\n_libraries = {}\n_libraries['libamd_smi.so']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    with pytest.raises(FeatureUnavailable, match=f"^{re.escape(NO_AMDSMI)}$"):
        AmdSmiPackageDevices().open()
    assert capsys.readouterr().out == ""
