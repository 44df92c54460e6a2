"""GPU device metrics through a real NVML library: the stand-in built from C by this test
(tests/harness/nvml_standin), loaded by pynvml through the dynamic loader's search path
(LD_LIBRARY_PATH), under the NVML adapter, the GPU metrics feed and the collector loop in a
process of their own (tests/harness/nvml_standin/sampler.py), each record through the real Avro
codec. Two scripted devices: exact values, a NOT_SUPPORTED metric as a marked gap, an error
counted and said once, per-process memory and utilisation named from /proc, and the scripted XID
in raw.gpumetrics within a second of when it was due. GPM (SM activity, occupancy, tensor
activity, ...) on the H100: warming up in its first sample, then DCGM's ratios exactly, the GPM
samples freed before NVML shut down; the A10 has no GPM: its GPM fields gaps, said once. Then
the distributed path: `zerotrace collector --gpu-metrics` publishing the same to the real Kafka,
and the `zerotrace profiler-agg` faust worker and the `zerotrace query` indexer making device
windows of them in OpenSearch."""

from __future__ import annotations

import ctypes
import json
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import free_port
from tests.harness.nvml_standin.build import LOG_ENV, SCRIPT_ENV, build_nvml_standin
from tests.harness.services import Service
from zerotrace import names
from zerotrace.bus_kafka import KafkaBus, read_topic_from_start
from zerotrace.codec import AvroCodec
from zerotrace.errors import PoisonInput
from zerotrace.gpu_fields import DCGM_FIELDS
from zerotrace.schema_registry_kafka import KafkaSchemaRegistry
from zerotrace.schemas import load_schema_dir
from zerotrace.store import Query
from zerotrace.store_opensearch import OpenSearchStore
from zerotrace_collector.cgroup import container_id_of
from zerotrace_profiler_agg.profile_step import INPUT_TOPICS

ROOT = Path(__file__).resolve().parents[2]
XID_AFTER_MS = 700  # after the events are registered: between two interval samples
INTERVAL_S = 0.5
RUN_S = 2.0


def script(gpu_pid: int) -> str:
    return f"""\
driver 550.54.15
device 0
name NVIDIA H100 80GB HBM3
uuid GPU-5a1c0e2d-0000-4000-8000-000000000000
utilization 37 12
encoder 5 167000
decoder 2 167000
memory 85899345920 536870912 80000000000 5362475008
temperature 41
power_mw 312456
energy_mj 987654321
clock_sm 1980
clock_mem 2619
clocks_event_reasons 0x44
remapped_rows 1 0 0 0
event_types 0x8
field 82 45
field 3 7
field 4 0
field 5 9
field 6 1
field 94 3
field 138 1000 all
field 139 2000 all
field 197 111
field 198 222
process {gpu_pid} 1073741824
process_util {gpu_pid} 55 20 0 0
xid 79 {XID_AFTER_MS}
mig_mode 0 0
gpm 1
gpm_metric 1 87.5
gpm_metric 2 62.5
gpm_metric 3 40.625
gpm_metric 5 37.5
gpm_metric 10 12.5
gpm_metric 11 0
gpm_metric 12 75
gpm_metric 13 6.25
device 1
name NVIDIA A10
uuid GPU-5a1c0e2d-0000-4000-8000-000000000001
utilization 3 1
memory 24146608128 0 20000000000 4146608128
temperature 30
power_mw !4
field 82 !3
"""


H100_METRICS: dict[str, Any] = {
    "gpu_util_pct": 37.0,
    "mem_copy_util_pct": 12.0,
    "enc_util_pct": 5.0,
    "dec_util_pct": 2.0,
    "fb_total_bytes": 85899345920,
    "fb_reserved_bytes": 536870912,
    "fb_free_bytes": 80000000000,
    "fb_used_bytes": 5362475008,
    "temperature_c": 41.0,
    "power_w": 312.456,
    "total_energy_consumption_mj": 987654321,
    "sm_clock_mhz": 1980,
    "mem_clock_mhz": 2619,
    "clocks_event_reasons": 0x44,
    "clocks_event_reason_names": ["SwPowerCap", "HwThermalSlowdown"],
    "correctable_remapped_rows": 1,
    "uncorrectable_remapped_rows": 0,
    "row_remap_pending": False,
    "row_remap_failure": False,
    "memory_temp_c": 45,
    "ecc_sbe_vol_total": 7,
    "ecc_dbe_vol_total": 0,
    "ecc_sbe_agg_total": 9,
    "ecc_dbe_agg_total": 1,
    "pcie_replay_counter": 3,
    "nvlink_tx_kib": 1000,
    "nvlink_rx_kib": 2000,
    "nvlink_bandwidth_total_kib": 3000,
    "pcie_tx_bytes": 111,
    "pcie_rx_bytes": 222,
    "mig_mode": False,
    "utilization_pct": 37.0,
    "memory_used_bytes": 5362475008,
    "memory_total_bytes": 85899345920,
    "driver_version": "550.54.15",
    "vendor": "nvidia",
    "model": "NVIDIA H100 80GB HBM3",
    "unsupported": [],
    "failed": [],
}


# DCGM's profiling fields from the scripted GPM percentages, as ratios (all exact in binary).
H100_GPM: dict[str, float] = {
    "gr_engine_active_ratio": 0.875,
    "sm_active_ratio": 0.625,
    "sm_occupancy_ratio": 0.40625,
    "pipe_tensor_active_ratio": 0.375,
    "dram_active_ratio": 0.125,
    "pipe_fp64_active_ratio": 0.0,
    "pipe_fp32_active_ratio": 0.75,
    "pipe_fp16_active_ratio": 0.0625,
}
A10_NO_GPM = (
    "GPU 1 (NVIDIA A10): no GPM (needs Hopper or newer): SM activity, occupancy and tensor "
    "activity not read"
)


def check_gpm_records(h100: list[dict[str, Any]], a10: list[dict[str, Any]]) -> None:
    """The H100's records in time order: the first warming up (no earlier GPM sample), every
    later one DCGM's ratios exactly; the A10's GPM fields gaps in every record."""
    first, *later = sorted(h100, key=lambda d: d["ts_ns"])
    assert all(first[name] is None for name in H100_GPM)
    assert first["warming_up"] == list(H100_GPM)
    assert not set(H100_GPM) & set(first["unsupported"] + first["failed"])
    assert later and all(
        {name: d[name] for name in H100_GPM} == H100_GPM and d["warming_up"] == [] for d in later
    )
    assert a10 and all(
        set(H100_GPM) <= set(d["unsupported"])
        and all(d[name] is None for name in H100_GPM)
        and d["warming_up"] == []
        and "mig_mode" in d["unsupported"]
        for d in a10
    )


GPU0_UUID = "GPU-5a1c0e2d-0000-4000-8000-000000000000"
COUNTER_FIELDS = {f.field for f in DCGM_FIELDS if f.counter}
GAUGE_FIELDS = {f.field for f in DCGM_FIELDS if not f.counter and f.field not in H100_GPM} | {
    "utilization_pct",
    "memory_used_bytes",
    "memory_total_bytes",
}


def check_device_windows(windows: list[dict[str, Any]], node: str, xid_due_ns: int) -> None:
    """The device windows (as stored) of one run of the stand-in on `node`: every scripted
    metric of the H100 exactly in each of its windows (the values never change, so min, max
    and last are the value and mean the fsum of n of them over n), its counters flat, the XID
    once; the A10's NOT_SUPPORTED metric a marked gap and its failed read named."""
    assert windows and all(w["node_id"] == node and w["kind"] == "gpu" for w in windows)
    h100 = [w for w in windows if w["device_index"] == 0]
    a10 = [w for w in windows if w["device_index"] == 1]
    assert h100 and a10
    for w in h100:
        assert (w["vendor"], w["model"], w["device"]) == (
            "nvidia",
            H100_METRICS["model"],
            GPU0_UUID,
        )
        assert w["window_id"] == f"gpu:{node}:{GPU0_UUID}:0:gpu::{w['window_start_ns']}"
        assert w["driver_version"] == H100_METRICS["driver_version"]
        assert w["clocks_event_reason_names"] == H100_METRICS["clocks_event_reason_names"]
        assert (w["unsupported"], w["failed"]) == ([], [])
        for name, value in H100_METRICS.items():
            if name in COUNTER_FIELDS:
                assert w["counters"][name] == {"first": value, "last": value, "increase": 0}
            elif name in GAUGE_FIELDS:
                v, n = float(value), w["samples"]
                assert w["metrics"][name] == {
                    "min": v,
                    "max": v,
                    "mean": math.fsum([v] * n) / n,
                    "last": v,
                    "samples": n,
                }, name
        [process] = w["processes"]
        assert (process["pid"], process["max_used_memory_bytes"]) == (os.getpid(), 1 << 30)
        assert (process["last_used_memory_bytes"], process["mean_sm_util_pct"]) == (1 << 30, 55.0)
    for name, value in H100_GPM.items():  # every sample but the first (warming up) has them
        for w in h100:
            if name in w["metrics"]:
                n = w["metrics"][name]["samples"]
                assert w["metrics"][name] == {
                    "min": value,
                    "max": value,
                    "mean": math.fsum([value] * n) / n,
                    "last": value,
                    "samples": n,
                }, name
        with_gpm = sum(w["metrics"][name]["samples"] for w in h100 if name in w["metrics"])
        assert with_gpm == sum(w["samples"] for w in h100) - 1, name
    events = [e for w in h100 for e in w["events"]]
    [event] = events
    assert (event["kind"], event["code"]) == ("xid", 79)
    assert xid_due_ns - 1_000_000 <= event["ts_ns"] < xid_due_ns + 1_000_000_000
    assert sum(w["event_count"] for w in h100) == 1
    for w in a10:
        assert "memory_temp_c" in w["unsupported"] and "memory_temp_c" not in w["metrics"]
        assert w["failed"] == ["power_w"] and "power_w" not in w["metrics"]
        assert "xid_errors" in w["unsupported"] and "xid_errors" not in w["metrics"]
        assert set(H100_GPM) <= set(w["unsupported"]) and not set(H100_GPM) & set(w["metrics"])
        n = w["samples"]
        assert w["metrics"]["gpu_util_pct"] == {
            "min": 3.0,
            "max": 3.0,
            "mean": math.fsum([3.0] * n) / n,
            "last": 3.0,
            "samples": n,
        }
        assert w["metrics"]["fb_used_bytes"]["last"] == 4146608128.0
        assert (w["events"], w["processes"]) == ([], [])


def standin_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a process that loads the stand-in as NVML, with the script."""
    lib = build_nvml_standin(tmp_path / "lib")
    script_file = tmp_path / "nvml-script.txt"
    script_file.write_text(script(os.getpid()))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{lib.parent}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env[SCRIPT_ENV] = str(script_file)
    env[LOG_ENV] = str(tmp_path / "nvml.log")
    return env


def due_ns_of_the_xid(log_text: str) -> int:
    """When the stand-in's one XID (79 on GPU 0) was due, epoch ns."""
    [line] = [line for line in log_text.splitlines() if line.startswith("xid ")]
    _xid, device, xid, _due, due_ns, _delivered, _delivered_ns = line.split()
    assert (int(device), int(xid)) == (0, 79)
    return int(due_ns)


def run_sampler(tmp_path: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any], str]:
    """(records, notes, counters, the stand-in's log) of one sampler run."""
    env = standin_env(tmp_path)
    log = Path(env[LOG_ENV])
    command = [sys.executable, "-m", "tests.harness.nvml_standin.sampler"]
    command += ["--duration", str(RUN_S), "--interval", str(INTERVAL_S), "--node", "node-gpu"]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    records = [line for line in lines if "datum" in line]
    notes = [line["note"] for line in lines if "note" in line]
    [counters] = [line["counters"] for line in lines if "counters" in line]
    return records, notes, counters, log.read_text() if log.exists() else ""


def gpm_samples_logged(log_text: str) -> list[str]:
    """What the stand-in logged at nvmlShutdown of the GPM samples allocated and freed."""
    return [line for line in log_text.splitlines() if line.startswith("gpm_samples ")]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_sampler(tmp_path_factory.mktemp("nvml"))


def of(records: list[dict[str, Any]], index: int, trigger: str) -> list[dict[str, Any]]:
    return [
        r["datum"]
        for r in records
        if r["datum"]["device_index"] == index and r["datum"]["trigger"] == trigger
    ]


def test_records_go_to_raw_gpumetrics_keyed_by_node(sampled: Any) -> None:
    records, _notes, counters, _log = sampled
    assert {(r["topic"], r["key"], r["record"]) for r in records} == {
        (names.RAW_GPUMETRICS.name, "node-gpu", names.RAW_GPUMETRICS.record)
    }
    assert counters["published"] == len(records)
    assert counters["gpu-metrics.samples"] == len(records)
    # Samples at 0, 0.5, 1.0 and 1.5 s (and 2.0 s when the last turn is on time), per device.
    assert 3 <= len(of(records, 0, "interval")) == len(of(records, 1, "interval")) <= 5


def test_every_metric_of_a_device_comes_out_exact(sampled: Any) -> None:
    records = sampled[0]
    first = of(records, 0, "interval")[0]
    assert {k: first[k] for k in H100_METRICS} == H100_METRICS
    assert first["device_uuid"] == "GPU-5a1c0e2d-0000-4000-8000-000000000000"
    assert first["xid_errors"] == 0  # events seen, none yet


def test_gpm_gives_exact_ratios_after_a_first_sample_warming_up_and_a10_gaps(
    sampled: Any,
) -> None:
    records, _notes, _counters, log = sampled
    h100 = [r["datum"] for r in records if r["datum"]["device_index"] == 0]
    check_gpm_records(h100, of(records, 1, "interval"))
    # Two GPM samples of the H100, from open to close, freed before NVML shut down.
    assert gpm_samples_logged(log) == ["gpm_samples allocated 2 freed 2"]


def test_the_gpu_process_is_named_as_the_node_names_it(sampled: Any) -> None:
    records = sampled[0]
    pid = os.getpid()
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    for datum in of(records, 0, "interval"):
        assert datum["processes"] == [
            {
                "pid": pid,
                "process_name": comm,
                "service": None,  # the sampler names no services (the CLI gives its cache)
                "container_id": container_id_of(pid),
                "used_memory_bytes": 1 << 30,
                "sm_util_pct": 55.0,
                "mem_util_pct": 20.0,
                "enc_util_pct": 0.0,
                "dec_util_pct": 0.0,
            }
        ]
    assert all(d["processes"] == [] for d in of(records, 1, "interval"))


def test_not_supported_is_a_marked_gap_and_another_error_is_counted_and_said_once(
    sampled: Any,
) -> None:
    records, notes, counters, _log = sampled
    a10 = of(records, 1, "interval")
    for datum in a10:
        assert datum["memory_temp_c"] is None and "memory_temp_c" in datum["unsupported"]
        assert datum["power_w"] is None and datum["failed"] == ["power_w"]
        assert "power_w" not in datum["unsupported"]
        assert datum["xid_errors"] is None and "xid_errors" in datum["unsupported"]
        assert (datum["gpu_util_pct"], datum["temperature_c"]) == (3.0, 30.0)
        assert datum["fb_used_bytes"] == 4146608128 and datum["fb_reserved_bytes"] == 0
    assert counters["gpu-metrics.nvml_errors"] == len(a10)
    assert notes == [
        A10_NO_GPM,  # at open, once
        "NVML error 4 (Insufficient Permissions) reading power_w of GPU 1: such reads are "
        "left empty and counted (nvml_errors)",
    ]


def test_the_scripted_xid_is_in_raw_gpumetrics_within_a_second(sampled: Any) -> None:
    records, _notes, counters, log = sampled
    due_ns = due_ns_of_the_xid(log)
    [record] = [r for r in records if r["datum"]["trigger"] == "xid"]
    datum = record["datum"]
    assert datum["device_index"] == 0 and datum["xid_errors"] == 79
    [event] = datum["xid_events"]
    assert event["xid"] == 79
    # Received after it was due (1 ms for the two clocks the stand-in reads), out within 1 s.
    assert event["ts_ns"] >= due_ns - 1_000_000
    assert 0 <= record["emitted_ns"] - due_ns < 1_000_000_000
    assert {k: datum[k] for k in H100_METRICS} == H100_METRICS  # the device's state then
    assert {k: datum[k] for k in H100_GPM} == H100_GPM  # since the interval sample before
    later = [d for d in of(records, 0, "interval") if d["ts_ns"] > datum["ts_ns"]]
    earlier = [d for d in of(records, 0, "interval") if d["ts_ns"] < datum["ts_ns"]]
    assert later and all(d["xid_errors"] == 79 and d["xid_events"] == [] for d in later)
    assert earlier and all(d["xid_errors"] == 0 for d in earlier)
    assert counters["gpu-metrics.xid_events"] == 1
    assert counters["gpu-metrics.nvml_event_errors"] == 0


def test_without_the_library_the_feed_says_so_in_one_line() -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has NVIDIA's NVML: its absence cannot be shown here")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", SCRIPT_ENV)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.harness.nvml_standin.sampler", "--duration", "0.3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0] == {"note": "no NVML (libnvidia-ml.so.1 not found): GPU device metrics off"}
    assert [line for line in lines if "datum" in line] == []


def test_the_collector_publishes_them_to_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The distributed path: `zerotrace collector --gpu-metrics` alone on the node (no eBPF
    feed), the stand-in as NVML, records on the real Kafka under the schema registry."""
    node = f"nvml-{uuid.uuid4().hex[:8]}"
    env = standin_env(tmp_path)
    env.update(
        ZEROTRACE_KAFKA=kafka_bootstrap, ZEROTRACE_NODE_ID=node, ZEROTRACE_HOME=str(tmp_path)
    )
    command = [sys.executable, "-m", "zerotrace_cli", "collector", "--no-sockets", "--no-files"]
    command += ["--gpu-metrics", "--gpu-interval", str(INTERVAL_S), "--duration", str(RUN_S)]
    command += ["--status-every", "0"]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "collector attached (gpu-metrics)" in done.stderr
    codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
    mine = []
    for message in read_topic_from_start(kafka_bootstrap, names.RAW_GPUMETRICS.name):
        try:
            record, datum = codec.decode(message.value)
        except PoisonInput:  # another test's garbage on the topic
            continue
        if datum["node_id"] == node:
            assert (record, message.key) == (names.RAW_GPUMETRICS.record, node.encode())
            mine.append((message.timestamp_ms, datum))
    first = next(d for _t, d in mine if d["device_index"] == 0 and d["trigger"] == "interval")
    assert {k: first[k] for k in H100_METRICS} == H100_METRICS
    a10 = [d for _t, d in mine if d["device_index"] == 1]
    assert a10 and all(
        "memory_temp_c" in d["unsupported"] and d["failed"] == ["power_w"] for d in a10
    )
    check_gpm_records([d for _t, d in mine if d["device_index"] == 0], a10)
    [(produced_ms, xid)] = [(t, d) for t, d in mine if d["trigger"] == "xid"]
    assert xid["xid_events"][0]["xid"] == 79 and xid["xid_errors"] == 79
    due_ms = due_ns_of_the_xid(Path(env[LOG_ENV]).read_text()) // 1_000_000
    assert 0 <= produced_ms - due_ms < 1000  # produced (the message's time) within 1 s


def start_group_at_the_end(bootstrap: str, group: str, topics: tuple[str, ...]) -> None:
    """A new consumer group that starts where `topics` end now: it reads this test's records,
    not the history of every earlier run."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.integration.test_profiler_agg_kafka import ends

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = [
            TopicPartition(topic, p, end)
            for topic in topics
            for p, end in ends(consumer, topic).items()
        ]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_profiler_agg_and_the_indexer_put_exact_device_windows_in_opensearch(
    kafka_bootstrap: str, opensearch_url: str, tmp_path: Path
) -> None:
    """The whole distributed path: `zerotrace collector --gpu-metrics` (the stand-in as NVML)
    -> raw.gpumetrics -> the `zerotrace profiler-agg` faust worker -> derived.device -> the
    `zerotrace query` indexer -> the OpenSearch `devices` index: every window of both devices
    with the scripted values exactly, every sample in one, the XID once."""
    node = f"nvml-dw-{uuid.uuid4().hex[:8]}"
    group = f"zerotrace-profiler-agg-nvml-{uuid.uuid4().hex[:8]}"
    env = standin_env(tmp_path)
    env.update(
        ZEROTRACE_KAFKA=kafka_bootstrap,
        ZEROTRACE_OPENSEARCH=opensearch_url,
        ZEROTRACE_NODE_ID=node,
        ZEROTRACE_HOME=str(tmp_path),
        ZEROTRACE_PROFILE_GROUP=group,
        ZEROTRACE_PROFILE_TICK_LAG_MS="1000",  # windows close 1 s past their end
    )
    KafkaBus(kafka_bootstrap).ensure_topics()
    start_group_at_the_end(kafka_bootstrap, group, INPUT_TOPICS)
    agg = Service("profiler-agg", ["profiler-agg"], env, tmp_path)
    ports = ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    query = Service("query", ["query", *ports], env, tmp_path)
    store = OpenSearchStore(opensearch_url)
    try:
        command = [sys.executable, "-m", "zerotrace_cli", "collector", "--no-sockets"]
        command += ["--no-files", "--gpu-metrics", "--gpu-interval", str(INTERVAL_S)]
        command += ["--duration", str(RUN_S), "--status-every", "0"]
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        codec = AvroCodec(load_schema_dir(), KafkaSchemaRegistry(kafka_bootstrap))
        raw: dict[int, int] = {}  # device index -> samples published
        for message in read_topic_from_start(kafka_bootstrap, names.RAW_GPUMETRICS.name):
            try:
                datum = codec.decode(message.value)[1]
            except PoisonInput:
                continue
            if datum["node_id"] == node:
                raw[datum["device_index"]] = raw.get(datum["device_index"], 0) + 1
        assert set(raw) == {0, 1}

        def stored() -> list[dict[str, Any]]:
            query_ = Query(equals={"node_id": node}, limit=1000)
            docs = store.search(names.INDEX_DEVICES, query_)
            return [{k: v for k, v in d.items() if k != "_id"} for d in docs]

        def folded() -> dict[int, int]:
            out: dict[int, int] = {}
            for w in stored():
                out[w["device_index"]] = out.get(w["device_index"], 0) + w["samples"]
            return out

        deadline = time.monotonic() + 120
        while folded() != raw:
            for service in (agg, query):
                assert service.proc.poll() is None, service.log.read_text()[-3000:]
            assert time.monotonic() < deadline, (folded(), raw, agg.log.read_text()[-3000:])
            time.sleep(1)
        windows = stored()
        assert len({w["window_id"] for w in windows}) == len(windows)
        due_ns = due_ns_of_the_xid(Path(env[LOG_ENV]).read_text())
        check_device_windows(windows, node, due_ns)
    finally:
        store.close()
        agg.stop()
        query.stop()


GPM_CONTRACT = """
import pynvml as nv
nv.nvmlInit()
h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
out = {"support": [nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice for h in (h0, h1)]}
a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()

def metrics(one, two, version=nv.NVML_GPM_METRICS_GET_VERSION):
    get = nv.c_nvmlGpmMetricsGet_t()
    get.version, get.numMetrics, get.sample1, get.sample2 = version, 2, one, two
    get.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
    get.metrics[1].metricId = nv.NVML_GPM_METRIC_INTEGER_UTIL  # not scripted
    try:
        nv.nvmlGpmMetricsGet(get)
    except nv.NVMLError as exc:
        return exc.value
    return [(m.nvmlReturn, m.value) for m in get.metrics[:2]]

try:
    nv.nvmlGpmSampleGet(h1, a)
except nv.NVMLError as exc:
    out["a10_sample"] = exc.value
nv.nvmlGpmSampleGet(h0, a)
out["one_sample"] = metrics(a, a)
nv.nvmlGpmSampleGet(h0, b)
out["in_order"] = metrics(a, b)
out["reversed"] = metrics(b, a)
out["old_version"] = metrics(a, b, version=2)
out["mig"] = nv.nvmlDeviceGetMigMode(h0)
nv.nvmlGpmSampleFree(a)
nv.nvmlGpmSampleFree(b)
nv.nvmlShutdown()
print(out)
"""


def test_the_standins_gpm_is_pynvmls_layout_and_refuses_a_misuse(tmp_path: Path) -> None:
    """The stand-in's GPM through pynvml's own ctypes structures: two successive samples of one
    device give the scripted metrics (an unscripted one NOT_SUPPORTED in its entry); one sample
    twice, the later first, or another struct version are refused, as a measure over no
    interval would be wrong. So the adapter's exact values above prove how it measures."""
    env = standin_env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", GPM_CONTRACT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == str(
        {
            "support": [1, 0],
            "a10_sample": 3,  # NOT_SUPPORTED
            "one_sample": 2,  # INVALID_ARGUMENT
            "in_order": [(0, 40.625), (3, 0.0)],
            "reversed": 2,
            "old_version": 25,  # ARGUMENT_VERSION_MISMATCH
            "mig": [0, 0],
        }
    )
    assert gpm_samples_logged(Path(env[LOG_ENV]).read_text()) == ["gpm_samples allocated 2 freed 2"]
