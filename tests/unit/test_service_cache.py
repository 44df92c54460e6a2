"""Service names per process, read once and again after a while
(zerotrace_collector.service_cache), and what records and spans make of them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from zerotrace.service_identity import parse_service_names
from zerotrace_collector.probes.event_layout import Direction, SockOp, Source
from zerotrace_collector.probes.socket_decode import SocketDataSample
from zerotrace_collector.proc_net import Endpoints
from zerotrace_collector.service_cache import ProcFacts, ServiceCache, read_proc, service_of
from zerotrace_collector.socket_records import socket_batch_record
from zerotrace_correlator.fileio_spans import file_open_span

pytestmark = pytest.mark.unit


class FakeProc:
    def __init__(self) -> None:
        self.procs: dict[int, ProcFacts] = {}
        self.now = 0.0

    def read(self, pid: int) -> ProcFacts | None:
        return self.procs.get(pid)

    def cache(self, rules: str = "") -> ServiceCache:
        return ServiceCache(
            parse_service_names(rules),
            read=self.read,
            clock=lambda: self.now,
            recheck_s=2.0,
        )


def test_a_process_is_read_once_and_again_when_its_pid_is_reused() -> None:
    proc = FakeProc()
    proc.procs[7] = (["python3", "-m", "app.server"], "0::/system.slice/x.service")
    cache = proc.cache()
    assert [cache.of(7, "python3") for _ in range(3)] == ["app.server"] * 3
    assert cache.reads == 1
    proc.procs[7] = (["python3", "-m", "other"], "0::/")  # pid reused
    proc.now = 1.0
    assert cache.of(7, "python3") == "app.server"  # not checked before recheck_s
    proc.now = 2.5
    assert cache.of(7, "python3") == "other"
    assert cache.reads == 2
    proc.procs[7] = (["python3", "-m", "exec.d"], "0::/")  # the same process exec'd
    proc.now = 5.0
    assert cache.of(7, "python3") == "exec.d" and cache.reads == 3


def test_a_process_that_is_gone_keeps_its_name_or_its_comm() -> None:
    proc = FakeProc()
    proc.procs[7] = (["/usr/bin/llama-server", "-m", "x.gguf"], "0::/")
    cache = proc.cache()
    assert cache.of(7, "llama-server") == "llama-server"
    proc.procs[7] = ([], "0::/")  # a zombie
    proc.now = 3.0
    assert cache.of(7, "llama-server") == "llama-server"
    del proc.procs[7]
    proc.now = 10.0
    assert cache.of(7, "llama-server") == "llama-server"  # late events of a gone process
    assert cache.of(8, "text-generation") == "text-generation"  # gone before it was read


def test_each_thread_name_is_its_own_entry_and_the_mapping_applies() -> None:
    proc = FakeProc()
    proc.procs[7] = (["python3", "-m", "vllm.entrypoints.openai.api_server"], "")
    cache = proc.cache("pt_main*=vllm-main")
    assert cache.of(7, "python3") == "vllm.entrypoints.openai.api_server"
    assert cache.of(7, "pt_main_thread") == "vllm-main"
    cache.forget(7)
    assert cache.of(7, "python3") == "vllm.entrypoints.openai.api_server"
    assert cache.reads == 3
    assert service_of(None, 7, "python3") is None


def test_the_cache_is_bounded() -> None:
    proc = FakeProc()
    for pid in range(10):
        proc.procs[pid] = (["node", f"s{pid}.js"], "")
    cache = ServiceCache(read=proc.read, max_entries=4)
    assert [cache.of(pid, "node") for pid in range(10)] == [f"s{pid}" for pid in range(10)]
    assert len(cache._names) <= 4


def test_a_live_process_is_read_from_proc() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        # Popen returns once exec began; the new command line is set up a moment later.
        deadline = time.monotonic() + 10
        facts = read_proc(child.pid)
        while facts is not None and not facts[0] and time.monotonic() < deadline:
            facts = read_proc(child.pid)
        assert facts is not None
        argv, cgroup = facts
        assert argv == [sys.executable, "-c", "import sys; sys.stdin.read()"]
        assert cgroup.strip()
        expected = os.path.basename(sys.executable)
        assert ServiceCache().of(child.pid, "python3") in (expected, *_named_by_cgroup(cgroup))
    finally:
        child.communicate(b"")
    assert read_proc(child.pid) is None


def _named_by_cgroup(cgroup: str) -> tuple[str, ...]:
    from zerotrace.service_identity import service_from_cgroup

    return tuple(name for name in service_from_cgroup(cgroup) if name)


def test_collector_records_carry_the_service_and_spans_use_it() -> None:
    proc = FakeProc()
    proc.procs[10] = (["python3", "-m", "http.server", "8000"], "0::/")
    cache = proc.cache()
    sample = SocketDataSample(
        pid=10, tid=11, fd=5, cgroup_id=1, start_mono_ns=2, end_mono_ns=3, nbytes=3,
        conn_start_ns=1, direction=Direction.INGRESS, source=Source.SYSCALL, op=SockOp.READ,
        flags=0, comm="python3", payload=b"GET",
    )  # fmt: skip
    endpoints = Endpoints("127.0.0.1", 8000, "127.0.0.1", 40000)
    batch = socket_batch_record([sample], "n", 0, None, endpoints, cache.of(10, "python3"))
    assert (batch["process_name"], batch["service"]) == ("python3", "http.server")
    raw = {
        "event_id": "n/10/11/2/open", "node_id": "n", "pid": 10, "tid": 11,
        "process_name": "python3", "service": "http.server", "container_id": None,
        "op": "OPEN", "path": "/tmp/x", "result": 3, "flags": 0, "start_ns": 2, "end_ns": 3,
    }  # fmt: skip
    assert file_open_span(raw)["service"] == "http.server"
    assert file_open_span({**raw, "service": None})["service"] == "python3"
