"""Realistic zerotrace.derived.ProfileWindow data for the profile query tests (unit,
integration, web): an inference service whose request thread spends most of its CPU in
hot_loop under handle_request, waits in wait_for_backend, allocates GPU memory from Python and
launches kernels; 10 s windows, frames in the shared frame format. Also speedscope's schema."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

S = 1_000_000_000
WINDOW_NS = 10 * S
REPO = Path(__file__).resolve().parents[2]
SPEEDSCOPE_CACHE = REPO / ".venv" / "cache" / "speedscope"
SPEEDSCOPE_SCHEMA = "package/dist/release/file-format-schema.json"

PY_MAIN = "py:<module> (/srv/app/server.py:88)"
PY_SERVE = "py:Server.serve_forever (/srv/app/server.py:41)"
PY_HANDLE = "py:handle_request (/srv/app/server.py:20)"
PY_HOT = "py:hot_loop (/srv/app/server.py:9)"
PY_WAIT = "py:wait_for_backend (/srv/app/server.py:14)"
PY_ALLOC = "py:Model.load (/srv/app/model.py:31)"
PY_FORWARD = "py:Model.forward (/srv/app/model.py:57)"
NATIVE_EVAL = "native:_PyEval_EvalFrameDefault [python3.11]"
NATIVE_CRC = "native:crc32_z [libz.so.1]"
NATIVE_ANON = "native:libfoo.so+0x1a2b"
KERNEL_SLEEP = "kernel:hrtimer_nanosleep"
KERNEL_SCHED = "kernel:schedule"


def _stack(tid: int, *frames: str) -> str:
    return ";".join((f"thread:{tid}", *frames))


# Per 10 s window of one process: folded stack -> weight, per profile type.
WINDOW_STACKS: dict[str, dict[str, int]] = {
    "ON_CPU": {
        _stack(101, PY_MAIN, PY_SERVE, PY_HANDLE, PY_HOT): 700,
        _stack(101, PY_MAIN, PY_SERVE, PY_HANDLE, PY_HOT, NATIVE_CRC): 90,
        _stack(101, PY_MAIN, PY_SERVE, PY_HANDLE, NATIVE_ANON): 40,
        _stack(102, PY_FORWARD, NATIVE_EVAL): 160,
        _stack(103, "native:epoll_wait [libc.so.6]", "kernel:do_epoll_wait"): 10,
    },
    "OFF_CPU": {
        _stack(101, PY_MAIN, PY_SERVE, PY_HANDLE, PY_WAIT, KERNEL_SLEEP, KERNEL_SCHED): 3 * S,
        _stack(103, "native:epoll_wait [libc.so.6]", "kernel:do_epoll_wait", KERNEL_SCHED): 7 * S,
    },
    "GPU_MEM_ALLOC": {
        _stack(102, PY_ALLOC, "cuda:cudaMalloc"): 512 << 20,
        _stack(102, PY_FORWARD, "cuda:cudaMallocAsync"): 64 << 20,
    },
    "GPU_LAUNCH": {
        _stack(102, PY_FORWARD, "cuda:cudaLaunchKernel"): 1200,
    },
}


def profile_window(
    start_ns: int,
    profile_type: str,
    stacks: dict[str, int],
    node: str = "node-a",
    service: str = "inference",
    pid: int = 4242,
) -> dict[str, Any]:
    """One complete zerotrace.derived.ProfileWindow datum."""
    return {
        "window_id": f"{node}/{service}/{pid}/{profile_type}/{start_ns}",
        "node_id": node,
        "service": service,
        "pid": pid,
        "profile_type": profile_type,
        "window_start_ns": start_ns,
        "window_end_ns": start_ns + WINDOW_NS,
        "stacks": dict(stacks),
        "samples": len(stacks) * 3,
        "dropped": 1 if profile_type == "GPU_MEM_INUSE" else 0,
    }


def inuse_stacks(i: int) -> dict[str, int]:
    """GPU memory still allocated at the end of window i: the model weights stay, the
    activations grow by 16 MiB a window (a leak the snapshot semantics must not double)."""
    return {
        _stack(102, PY_ALLOC, "cuda:cudaMalloc"): 512 << 20,
        _stack(102, PY_FORWARD, "cuda:cudaMallocAsync"): (16 << 20) * (i + 1),
    }


def realistic_windows(first_start_ns: int, count: int) -> list[dict[str, Any]]:
    """`count` consecutive 10 s windows of every profile type for two processes on two nodes;
    the second process (pid 5151 on node-b, service 'trainer') has half the weights."""
    windows = []
    for i in range(count):
        start = first_start_ns + i * WINDOW_NS
        for node, service, pid, factor in (
            ("node-a", "inference", 4242, 2),
            ("node-b", "trainer", 5151, 1),
        ):
            for ptype, stacks in WINDOW_STACKS.items():
                scaled = {k: v * factor // 2 for k, v in stacks.items()}
                windows.append(profile_window(start, ptype, scaled, node, service, pid))
            inuse = {k: v * factor // 2 for k, v in inuse_stacks(i).items()}
            windows.append(profile_window(start, "GPU_MEM_INUSE", inuse, node, service, pid))
    return windows


def speedscope_schema() -> dict[str, Any]:
    """speedscope's own file-format schema, from its npm package, fetched once with npm into
    .venv/cache/speedscope/ (the registry is only asked when the cache is empty)."""
    cached = SPEEDSCOPE_CACHE / "file-format-schema.json"
    if not cached.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is missing: it fetches speedscope's schema once", pytrace=False)
        SPEEDSCOPE_CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "pack", "speedscope", "--silent", "--pack-destination", str(SPEEDSCOPE_CACHE)],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"npm pack speedscope failed: {done.stderr[-1000:]}"
        tarball = SPEEDSCOPE_CACHE / done.stdout.split()[-1]
        with tarfile.open(tarball) as tar:
            member = tar.extractfile(SPEEDSCOPE_SCHEMA)
            assert member is not None, f"{tarball} has no {SPEEDSCOPE_SCHEMA}"
            data = member.read()
        cached.write_bytes(data)
        tarball.unlink()
    schema: dict[str, Any] = json.load(io.BytesIO(cached.read_bytes()))
    return schema


def index_profiles(store: Any, codec: Any, windows: list[dict[str, Any]], group: str) -> int:
    """Through the real path: Avro-encoded derived.profile records on the in-process bus, a
    fresh Indexer (its own consumer group) into the store. Returns how many were indexed."""
    from tests.unit.test_llm_query_documents import index_all
    from zerotrace import names
    from zerotrace.bus_memory import InMemoryBroker

    broker = InMemoryBroker()
    broker.ensure_topics()
    producer = broker.producer()
    for window in windows:
        value = codec.encode(names.DERIVED_PROFILE.record, window)
        producer.produce(names.DERIVED_PROFILE.name, window["service"].encode(), value)
    indexer = index_all(broker, store, codec, group)
    assert indexer.dead_letters == 0
    return int(indexer.indexed)
