"""A GPU device sample as a raw.gpumetrics datum (zerotrace_collector/gpu_metrics_record.py),
through the real Avro codec; and the schema's growth is additive: a record of the first
version reads with the new schema and the reverse."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import SCHEMA_DIR, parse_schema_text
from zerotrace_collector.gpu_devices import (
    DCGM_FIELDS,
    METRIC_FIELDS,
    DeviceEvent,
    DeviceInfo,
    ProcessGpuUse,
    SampleBuilder,
)
from zerotrace_collector.gpu_metrics_record import (
    TRIGGER_XID,
    ProcessNames,
    device_metrics_record,
)

pytestmark = pytest.mark.unit

RECORD = names.RAW_GPUMETRICS.record
DEVICE = DeviceInfo(1, "GPU-1", "NVIDIA A10")
# The schema as the first version had it (before DCGM's metrics were added).
FIRST_VERSION = {
    "type": "record",
    "namespace": "zerotrace.raw",
    "name": "GpuDeviceMetrics",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "node_id", "type": "string"},
        {"name": "ts_ns", "type": "long"},
        {"name": "vendor", "type": "string"},
        {"name": "device_index", "type": "int"},
        {"name": "device_uuid", "type": "string"},
        {"name": "model", "type": "string"},
        {"name": "utilization_pct", "type": "double"},
        {"name": "memory_used_bytes", "type": "long"},
        {"name": "memory_total_bytes", "type": "long"},
        {"name": "temperature_c", "type": ["null", "double"], "default": None},
        {"name": "power_w", "type": ["null", "double"], "default": None},
    ],
}


def full_sample() -> Any:
    b = SampleBuilder(DEVICE, 1_000)
    b.put("gpu_util_pct", 37)
    b.put("mem_copy_util_pct", 12)
    b.put("fb_used_bytes", 5_000)
    b.put("fb_total_bytes", 8_000)
    b.put("temperature_c", 41)
    b.put("power_w", 123.456)
    b.put("row_remap_failure", False)
    b.put("clocks_event_reasons", 0x44)
    b.reason_names = ("SwPowerCap", "HwThermalSlowdown")
    b.fail(["sm_clock_mhz"])
    b.warm_up(["sm_active_ratio"])
    b.processes = (ProcessGpuUse(4242, 1 << 30, 55.0, 20.0, 0.0, 0.0), ProcessGpuUse(77))
    return b.build()


def test_a_sample_becomes_the_datum_with_gaps_marked() -> None:
    datum = device_metrics_record(
        full_sample(),
        "node-a",
        "nvidia",
        driver_version="550.54.15",
        trigger=TRIGGER_XID,
        xid_events=[DeviceEvent(1, 79, 990)],
        process_names={4242: ProcessNames("python3", "trainer", "c0ffee")},
    )
    assert datum["event_id"] == "node-a/GPU-1/1000/xid"
    assert datum["utilization_pct"] == 37.0 and isinstance(datum["utilization_pct"], float)
    assert (datum["memory_used_bytes"], datum["memory_total_bytes"]) == (5_000, 8_000)
    assert datum["gpu_util_pct"] == 37.0 and isinstance(datum["gpu_util_pct"], float)
    assert datum["temperature_c"] == 41.0 and isinstance(datum["temperature_c"], float)
    assert datum["row_remap_failure"] is False
    assert datum["sm_clock_mhz"] is None and datum["failed"] == ["sm_clock_mhz"]
    assert datum["power_w"] == 123.456
    assert "sm_clock_mhz" not in datum["unsupported"] and "mem_clock_mhz" in datum["unsupported"]
    assert datum["sm_active_ratio"] is None and datum["warming_up"] == ["sm_active_ratio"]
    assert "sm_active_ratio" not in datum["unsupported"]
    assert datum["clocks_event_reason_names"] == ["SwPowerCap", "HwThermalSlowdown"]
    assert datum["xid_events"] == [{"xid": 79, "ts_ns": 990}]
    assert datum["trigger"] == "xid" and datum["driver_version"] == "550.54.15"
    assert datum["processes"] == [
        {
            "pid": 4242,
            "process_name": "python3",
            "service": "trainer",
            "container_id": "c0ffee",
            "used_memory_bytes": 1 << 30,
            "sm_util_pct": 55.0,
            "mem_util_pct": 20.0,
            "enc_util_pct": 0.0,
            "dec_util_pct": 0.0,
        },
        {
            "pid": 77,
            "process_name": None,
            "service": None,
            "container_id": None,
            "used_memory_bytes": None,
            "sm_util_pct": None,
            "mem_util_pct": None,
            "enc_util_pct": None,
            "dec_util_pct": None,
        },
    ]


def test_the_first_versions_required_fields_are_minus_one_where_unknown() -> None:
    datum = device_metrics_record(SampleBuilder(DEVICE, 5).build(), "n", "nvidia")
    assert datum["utilization_pct"] == -1.0
    assert datum["memory_used_bytes"] == -1 and datum["memory_total_bytes"] == -1
    assert datum["gpu_util_pct"] is None and "gpu_util_pct" in datum["unsupported"]
    assert datum["trigger"] == "interval" and datum["xid_events"] == [] == datum["processes"]
    assert datum["health"] is None  # NVML gives no verdict of its own


def test_the_vendors_health_verdict_is_carried_as_printed(codec: AvroCodec) -> None:
    b = SampleBuilder(DEVICE, 5)
    b.health = "Warning"
    datum = device_metrics_record(b.build(), "n", "huawei")
    assert datum["health"] == "Warning"
    assert codec.decode(codec.encode(RECORD, datum))[1]["health"] == "Warning"


def test_the_datum_round_trips_through_the_codec(codec: AvroCodec) -> None:
    datum = device_metrics_record(full_sample(), "node-a", "nvidia", driver_version="550")
    assert codec.decode(codec.encode(RECORD, datum)) == (RECORD, datum)


_VALUES = {
    "long": st.integers(0, 2**63 - 1),
    "double": st.floats(0, 1e6, allow_nan=False),
    "boolean": st.booleans(),
}


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_any_sample_round_trips(data: st.DataObject) -> None:
    codec = AvroCodec(
        {s.full_name: s for s in [parse_schema_text(_schema_text())]}, InMemorySchemaRegistry()
    )
    b = SampleBuilder(DEVICE, data.draw(st.integers(0, 2**62)))
    for f in DCGM_FIELDS:
        if data.draw(st.booleans()):
            b.put(f.field, data.draw(_VALUES[f.avro]))
    b.fail(data.draw(st.lists(st.sampled_from(METRIC_FIELDS), max_size=3)))
    datum = device_metrics_record(b.build(), "n", "nvidia")
    assert codec.decode(codec.encode(RECORD, datum)) == (RECORD, datum)


def _schema_text() -> str:
    return (SCHEMA_DIR / "raw" / "gpu_device_metrics.avsc").read_text()


def test_records_of_the_first_version_and_the_new_read_each_other() -> None:
    registry = InMemorySchemaRegistry()
    old = AvroCodec({RECORD: parse_schema_text(json.dumps(FIRST_VERSION))}, registry)
    new = AvroCodec({RECORD: parse_schema_text(_schema_text())}, registry)
    datum = device_metrics_record(full_sample(), "n", "nvidia")
    _name, as_old = old.decode(new.encode(RECORD, datum))
    assert as_old == {f["name"]: datum[f["name"]] for f in FIRST_VERSION["fields"]}  # type: ignore[index]
    _name, as_new = new.decode(old.encode(RECORD, as_old))
    assert as_new["gpu_util_pct"] is None and as_new["unsupported"] == []
    assert as_new["warming_up"] == [] and as_new["sm_active_ratio"] is None
    assert as_new["trigger"] == "interval" and as_new["processes"] == []
    assert as_new["health"] is None
    assert as_new["utilization_pct"] == 37.0
