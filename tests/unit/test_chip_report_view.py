"""The chip comparison report over recorded outputs of an MI300X (amd-smi, ROCm 6.4) and a
910B (npu-smi 23.0) and a hand-built H100 renders with exact figures as text, and as an HTML
page whose tables hold the expected rows; a period from the store (chip_compare's answer)
renders through the same view, without percentiles and with its counters and gaps."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.unit.device_data import filled_store
from zerotrace_cli.chip_report_view import (
    PeriodFacts,
    counter_label,
    render_html,
    render_text,
    report_metric,
    rows_of_comparison,
)
from zerotrace_collector.chip_report import ChipRow, ReportMetric, chip_report
from zerotrace_collector.gpu_devices import DeviceInfo, DeviceSample, SampleBuilder
from zerotrace_collector.smi_recordings import read_recording
from zerotrace_collector.smi_values import MIB
from zerotrace_query.chip_compare import ModelsFilter, chip_comparison

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H100 = "NVIDIA H100 80GB HBM3"


def _h100(index: int, util: float, power: float, used_mib: int, temp: float) -> DeviceSample:
    b = SampleBuilder(DeviceInfo(index, f"GPU-h100-{index}", H100), 1)
    b.put("gpu_util_pct", util)
    b.put("power_w", power)
    b.put("fb_used_bytes", used_mib * MIB)
    b.put("fb_total_bytes", 81559 * MIB)
    b.put("temperature_c", temp)
    b.put("sm_clock_mhz", 1980)
    b.put("mem_clock_mhz", 2619)
    b.put("mem_copy_util_pct", 40.0)
    return b.build()


def _rows() -> list[ChipRow]:
    samples = [
        *read_recording(FIXTURES / "amd_smi" / "rocm-6.4"),
        _h100(0, 100.0, 690.5, 71680, 71.0),
        _h100(1, 60.0, 412.0, 40960, 63.0),
        *read_recording(FIXTURES / "npu_smi" / "23.0.rc3-910b"),
    ]
    return chip_report(samples)


# The expected terminal text, figure by figure (too wide for a source line):
# tests/fixtures/chip_report/mi300x_h100_910b.txt.
EXPECTED = FIXTURES / "chip_report" / "mi300x_h100_910b.txt"


def test_text_has_exact_figures() -> None:
    assert render_text(_rows()) == EXPECTED.read_text(encoding="utf-8").splitlines()


def test_no_samples_is_one_line() -> None:
    assert render_text([]) == ["no GPU samples in the period"]


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.links = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("link", "script", "img") or "src" in a or "href" in a:
            self.links += 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._table is not None and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None


def test_html_is_self_contained_with_the_expected_rows() -> None:
    page = render_html(_rows())
    parser = _Tables()
    parser.feed(page)
    parser.close()
    assert parser.links == 0
    chips = parser.tables["chips"]
    assert chips == [
        ["Chip model", "Devices", "Samples"],
        ["AMD Instinct MI300X", "2", "2"],
        ["Ascend 910B3", "2", "2"],
        [H100, "2", "2"],
    ]
    metrics = parser.tables["metrics"]
    assert metrics[0] == [
        "Metric",
        "Unit",
        "Chip model",
        "Min",
        "Mean",
        "P50",
        "P95",
        "Max",
        "Gaps",
    ]
    assert len(metrics) == 1 + 10 * 3
    assert metrics[1] == [
        "Utilisation (GPU / GFX / AI Core)",
        "%",
        "AMD Instinct MI300X",
        "83.0",
        "90.5",
        "90.5",
        "97.2",
        "98.0",
        "0%",
    ]
    assert [
        "Memory temperature",
        "C",
        H100,
        "-",
        "-",
        "-",
        "-",
        "-",
        "100%",
    ] in metrics
    assert [
        "Power",
        "W",
        "Ascend 910B3",
        "98.6",
        "205.5",
        "205.5",
        "301.7",
        "312.4",
        "0%",
    ] in metrics


def test_html_escapes_model_names() -> None:
    b = SampleBuilder(DeviceInfo(0, "x", "<b>chip</b>"), 1)
    b.put("gpu_util_pct", 1.0)
    page = render_html(chip_report([b.build()]))
    assert "<b>chip</b>" not in page and "&lt;b&gt;chip&lt;/b&gt;" in page


def test_a_period_from_the_store_renders_without_percentiles_and_with_its_facts() -> None:
    store = filled_store()
    try:
        body = chip_comparison(store, ModelsFilter())
    finally:
        store.close()
    rows, facts = rows_of_comparison(body)
    assert [r.model for r in rows] == ["AMD Instinct MI300X", H100]
    assert facts[H100] == PeriodFacts(
        vendor="nvidia",
        windows=5,
        xid_count=3,
        xid_codes=[(48, 1), (63, 1), (79, 1)],
        counters={"total_energy_consumption_mj": (10_500, 1), "pcie_tx_bytes": (4, 1)},
        not_given=["row_remap_failure", "ecc_dbe_vol_total"],
    )
    parser = _Tables()
    parser.feed(render_html(rows, "period", facts))
    parser.close()
    assert parser.links == 0
    assert parser.tables["chips"] == [
        ["Chip model", "Devices", "Samples", "Windows", "XIDs", "XID codes"],
        ["AMD Instinct MI300X", "1", "4", "4", "0", "-"],
        [H100, "2", "9", "5", "3", "48 x1, 63 x1, 79 x1"],
    ]
    metrics = parser.tables["metrics"]
    assert metrics[0] == ["Metric", "Unit", "Chip model", "Min", "Mean", "Max", "Gaps"]
    assert ["Memory used", "GiB", H100, "0.0", "1.8", "4.0", "0%"] in metrics
    assert ["Memory used share", "%", "AMD Instinct MI300X", "-", "-", "-", "100%"] in metrics
    assert parser.tables["counters"] == [
        ["Counter", "Unit", "Chip model", "Increase", "Devices"],
        ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ", "AMD Instinct MI300X", "-", "0"],
        ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ", H100, "10,500", "1"],
        ["DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "B", "AMD Instinct MI300X", "-", "0"],
        ["DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "B", H100, "4", "1"],
        ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "", "AMD Instinct MI300X", "12", "1"],
        ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "", H100, "-", "0"],
    ]
    assert parser.tables["not-given"][2] == [H100, "row_remap_failure, ecc_dbe_vol_total"]


def test_metric_labels_and_units() -> None:
    assert report_metric("sm_clock_mhz") == ReportMetric("sm_clock_mhz", "Compute clock", "MHz")
    assert report_metric("enc_util_pct") == ReportMetric("enc_util_pct", "Encoder utilisation", "%")
    assert report_metric("fb_free_bytes") == ReportMetric(
        "fb_free_bytes", "Framebuffer free", "GiB", 1 / 1024**3
    )
    assert report_metric("row_remap_failure").label == "A row remapping failed"
    assert counter_label("nvlink_tx_kib") == ("DCGM_FI_PROF_NVLINK_TX_BYTES", "KiB")
    assert counter_label("ecc_sbe_vol_total") == ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "")
