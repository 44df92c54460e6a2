from __future__ import annotations

from zerotrace.codec import AvroCodec
from zerotrace_collector.cgroup import container_id_from_cgroup
from zerotrace_collector.probes.fileio_decode import FileOpenSample, FileRwSample
from zerotrace_collector.records import file_open_record, file_rw_record

SAMPLE = FileOpenSample(
    pid=10,
    tid=11,
    cgroup_id=5,
    start_mono_ns=100,
    end_mono_ns=250,
    ret=4,
    flags=0o2,
    comm="python3",
    path="/tmp/x",
)


def test_record_has_epoch_times_and_a_deterministic_id(codec: AvroCodec) -> None:
    record = file_open_record(SAMPLE, "node-a", 1_000_000, "c" * 64)
    assert record["start_ns"] == 1_000_100 and record["end_ns"] == 1_000_250
    assert record["event_id"] == "node-a/10/11/1000100/open"
    assert record == file_open_record(SAMPLE, "node-a", 1_000_000, "c" * 64)
    assert codec.decode(codec.encode("zerotrace.raw.FileIO", record))[1] == record


def test_a_read_is_a_fileio_record_of_its_bytes(codec: AvroCodec) -> None:
    sample = FileRwSample(10, 11, 4, 5, 100, 250, 4096, "READ", "python3", "/m/w.bin")
    record = file_rw_record(sample, "node-a", 1_000_000, None)
    assert record["event_id"] == "node-a/10/11/1000100/read"
    assert (record["op"], record["result"], record["path"], record["flags"]) == (
        "READ",
        4096,
        "/m/w.bin",
        0,
    )
    assert codec.decode(codec.encode("zerotrace.raw.FileIO", record))[1] == record


DOCKER = "0::/system.slice/docker-" + "ab" * 32 + ".scope\n"
K8S = "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + "0f" * 32 + ".scope\n"
CGROUP_V1 = "12:pids:/docker/" + "12" * 32 + "\n11:cpu:/docker/" + "12" * 32 + "\n"


def test_container_ids_from_cgroup_paths() -> None:
    assert container_id_from_cgroup(DOCKER) == "ab" * 32
    assert container_id_from_cgroup(K8S) == "0f" * 32
    assert container_id_from_cgroup(CGROUP_V1) == "12" * 32
    assert container_id_from_cgroup("0::/user.slice/user-0.slice/session-1.scope\n") is None
    assert container_id_from_cgroup("") is None
