"""The DCGM field table of the shared library (zerotrace/gpu_fields.py): which fields are
counters, that every one is a field of zerotrace.raw.GpuDeviceMetrics of its type, and which
ones /metrics converts to DCGM's unit or exports under zerotrace's own name."""

from __future__ import annotations

import json

import pytest

from zerotrace import names
from zerotrace.gpu_fields import DCGM_FIELDS, KB, METRIC_FIELDS, MIB, DcgmField
from zerotrace.schemas import SCHEMA_DIR

pytestmark = pytest.mark.unit

# Written out apart from the table: what DCGM documents as cumulative since the driver loaded
# (or over the device's life). Everything else is read as it is at the sample.
COUNTERS = {
    "total_energy_consumption_mj",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "pcie_replay_counter",
    "ecc_sbe_vol_total",
    "ecc_dbe_vol_total",
    "ecc_sbe_agg_total",
    "ecc_dbe_agg_total",
    "nvlink_bandwidth_total_kib",
    "nvlink_tx_kib",
    "nvlink_rx_kib",
}


def raw_fields() -> dict[str, dict[str, object]]:
    text = (SCHEMA_DIR / "raw" / "gpu_device_metrics.avsc").read_text()
    schema = json.loads(text)
    assert f"{schema['namespace']}.{schema['name']}" == names.RAW_GPUMETRICS.record
    return {f["name"]: f for f in schema["fields"]}


def test_counters_are_the_cumulative_fields_and_say_so_in_their_doc() -> None:
    assert {f.field for f in DCGM_FIELDS if f.counter} == COUNTERS
    for f in DCGM_FIELDS:
        assert f.counter == ("(counter" in f.doc), f.field  # and a doc with it is a counter
        assert not f.counter or f.avro == "long", f.field  # a counter counts whole units


def test_a_gauge_doc_never_calls_it_a_counter() -> None:
    gauges = [f for f in DCGM_FIELDS if not f.counter]
    assert len(gauges) == len(DCGM_FIELDS) - len(COUNTERS) == 28
    assert all("counter" not in f.doc.replace("PCIE_REPLAY_COUNTER", "") for f in gauges)


def test_metric_fields_are_nullable_schema_fields_of_their_type() -> None:
    fields = raw_fields()
    assert tuple(f.field for f in DCGM_FIELDS) == METRIC_FIELDS
    assert len(set(METRIC_FIELDS)) == len(METRIC_FIELDS)
    for f in DCGM_FIELDS:
        assert fields[f.field]["type"] == ["null", f.avro], f.field
        assert fields[f.field]["default"] is None
        assert f.dcgm in str(fields[f.field]["doc"]), f.field  # a DCGM user finds the name


def test_the_profiling_fields_are_ratios_as_dcgm_gives_them() -> None:
    prof = [f for f in DCGM_FIELDS if f.dcgm.startswith("DCGM_FI_PROF_") and "NVLINK" not in f.dcgm]
    assert [f.field for f in prof] == [
        "gr_engine_active_ratio",
        "sm_active_ratio",
        "sm_occupancy_ratio",
        "pipe_tensor_active_ratio",
        "dram_active_ratio",
        "pipe_fp64_active_ratio",
        "pipe_fp32_active_ratio",
        "pipe_fp16_active_ratio",
    ]
    assert all(f.avro == "double" and "0..1" in f.doc and not f.counter for f in prof)
    defaults = {f.dcgm for f in prof if f.exporter_default}
    assert defaults == {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }


def test_names_are_dcgms_and_the_table_is_frozen() -> None:
    assert all(f.dcgm.startswith(("DCGM_FI_DEV_", "DCGM_FI_PROF_")) for f in DCGM_FIELDS)
    assert {f.avro for f in DCGM_FIELDS} == {"long", "double", "boolean"}
    field = DcgmField("DCGM_FI_X", "x", "long", "A thing, bytes.", False, counter=True)
    assert field.counter  # said, not read from the doc
    assert (field.export_divisor, field.prometheus_name) == (1, "DCGM_FI_X")
    with pytest.raises(TypeError):
        DcgmField("DCGM_FI_X", "x", "long", "A thing.", False)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        field.field = "y"  # type: ignore[misc]


def test_only_the_fields_in_another_unit_than_dcgms_are_scaled_or_renamed() -> None:
    scaled = {f.dcgm: f.export_divisor for f in DCGM_FIELDS if f.export_divisor != 1}
    assert (MIB, KB) == (1_048_576, 1024)
    assert scaled == {
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": KB,  # bytes here, KB in DCGM
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": KB,
        "DCGM_FI_DEV_FB_FREE": MIB,  # bytes here, MiB in DCGM
        "DCGM_FI_DEV_FB_USED": MIB,
        "DCGM_FI_DEV_FB_RESERVED": MIB,
        "DCGM_FI_DEV_FB_TOTAL": MIB,
    }
    renamed = {f.dcgm: f.prometheus_name for f in DCGM_FIELDS if f.prometheus_name != f.dcgm}
    assert renamed == {  # cumulative KiB here, a rate in bytes/s in DCGM
        "DCGM_FI_PROF_NVLINK_TX_BYTES": "zerotrace_gpu_nvlink_tx_kib_total",
        "DCGM_FI_PROF_NVLINK_RX_BYTES": "zerotrace_gpu_nvlink_rx_kib_total",
    }
    for f in DCGM_FIELDS:  # where DCGM's unit differs, the doc says DCGM's
        differs = f.dcgm in scaled or f.dcgm in renamed
        assert differs == ("DCGM's" in f.doc), f.field
        assert not f.export_name or (f.counter and f.export_name.endswith("_total")), f.field
