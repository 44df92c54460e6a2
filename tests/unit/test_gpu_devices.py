"""The vendor-neutral GPU sample model (zerotrace_collector/gpu_devices.py): the DCGM table is
dcgm-exporter's default list and agrees with the schema, and a metric not read is a gap
(null and named), never a value."""

from __future__ import annotations

import json

import pytest

from zerotrace.schemas import SCHEMA_DIR
from zerotrace_collector.gpu_devices import (
    DCGM_FIELDS,
    METRIC_FIELDS,
    NOT_READ,
    DeviceInfo,
    SampleBuilder,
    with_xid,
)

pytestmark = pytest.mark.unit

# The uncommented lines of dcgm-exporter's etc/default-counters.csv (NVIDIA/dcgm-exporter), with
# the three profiling fields of its "DCP metrics" lines (SM activity and occupancy and the FP
# pipes are there commented out).
DCGM_EXPORTER_DEFAULTS = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
)
DEVICE = DeviceInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3")


def schema_fields() -> dict[str, object]:
    path = SCHEMA_DIR / "raw" / "gpu_device_metrics.avsc"
    return {f["name"]: f for f in json.loads(path.read_text())["fields"]}


def test_every_default_counter_of_dcgm_exporter_is_read_or_said_why_not() -> None:
    read = {f.dcgm for f in DCGM_FIELDS if f.exporter_default}
    not_read = {name for name, _why in NOT_READ}
    assert read | not_read == set(DCGM_EXPORTER_DEFAULTS)
    assert not read & not_read


def test_names_are_unique_both_ways() -> None:
    assert len({f.dcgm for f in DCGM_FIELDS}) == len(DCGM_FIELDS)
    assert len(set(METRIC_FIELDS)) == len(DCGM_FIELDS)


def test_every_metric_is_a_nullable_schema_field_of_its_type_defaulting_to_null() -> None:
    fields = schema_fields()
    for f in DCGM_FIELDS:
        field = fields[f.field]
        assert field["type"] == ["null", f.avro], f.field  # type: ignore[index]
        assert field["default"] is None, f.field  # type: ignore[index]
        assert f.dcgm in field["doc"] or f.field in ("temperature_c", "power_w")  # type: ignore[index]


def test_a_metric_not_put_is_unsupported_and_null() -> None:
    b = SampleBuilder(DEVICE, 7)
    b.put("gpu_util_pct", 37)
    b.put("fb_used_bytes", 0)  # a real zero stays a zero
    sample = b.build()
    assert sample.metrics["gpu_util_pct"] == 37
    assert sample.metrics["fb_used_bytes"] == 0
    assert sample.metrics["power_w"] is None
    assert set(sample.unsupported) == set(METRIC_FIELDS) - {"gpu_util_pct", "fb_used_bytes"}
    assert sample.failed == ()
    assert list(sample.metrics) == list(METRIC_FIELDS)  # every field, in the table's order


def test_a_failed_read_is_null_and_named_failed_not_unsupported() -> None:
    b = SampleBuilder(DEVICE, 7)
    b.put("power_w", 100.0)
    b.fail(["power_w", "temperature_c"])  # a value put before the failure does not stay
    assert b.value("power_w") is None
    sample = b.build()
    assert sample.failed == ("temperature_c", "power_w")  # table order
    assert "power_w" not in sample.unsupported and "temperature_c" not in sample.unsupported
    assert sample.metrics["power_w"] is None


def test_a_metric_warming_up_is_null_and_named_so_not_unsupported() -> None:
    b = SampleBuilder(DEVICE, 7)
    b.put("sm_active_ratio", 0.5)
    b.warm_up(["sm_active_ratio", "sm_occupancy_ratio"])  # a value put before does not stay
    b.warm_up(["power_w"])
    b.fail(["power_w"])  # failed wins: the read was tried and failed
    sample = b.build()
    assert sample.warming_up == ("sm_active_ratio", "sm_occupancy_ratio")  # table order
    assert sample.metrics["sm_active_ratio"] is None
    assert sample.failed == ("power_w",)
    assert not {"sm_active_ratio", "sm_occupancy_ratio", "power_w"} & set(sample.unsupported)
    assert len(sample.unsupported) == len(METRIC_FIELDS) - 3


def test_an_unknown_metric_name_is_a_bug_not_a_silent_field() -> None:
    b = SampleBuilder(DEVICE, 7)
    with pytest.raises(KeyError):
        b.put("gpu_utilisation", 1)
    with pytest.raises(KeyError):
        b.fail(["gpu_utilisation"])
    with pytest.raises(KeyError):
        b.warm_up(["sm_activity"])


def test_with_xid_fills_the_last_xid_and_clears_its_gap() -> None:
    sample = SampleBuilder(DEVICE, 7).build()
    assert "xid_errors" in sample.unsupported
    seen = with_xid(sample, 79)
    assert seen.metrics["xid_errors"] == 79
    assert "xid_errors" not in seen.unsupported
    assert with_xid(sample, 0).metrics["xid_errors"] == 0  # none yet: 0, XIDs are never 0
    assert sample.metrics["xid_errors"] is None  # the original is not changed
