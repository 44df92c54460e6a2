"""Pure tests of the GPU probe's record decoder (no bcc, no root)."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.errors import MalformedEvent
from zerotrace_collector.probes.event_layout import ZT_EVENT_GPU_CALL, ZT_EVENT_GPU_LIB, PyStatus
from zerotrace_collector.probes.gpu_decode import (
    GPU_APIS,
    ApiKind,
    GpuCallSample,
    GpuLibSample,
    api_named,
    call_size,
    decode_gpu_event,
)

pytestmark = pytest.mark.unit

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
CALL = struct.Struct("<IIIIQQQQqiI16sQ")
LIB = struct.Struct("<IIIiIIQQ256s")
DEPTH = 48


def py_section(
    frames: Sequence[tuple[int, int]] = (), status: int = 0, depth: int | None = None
) -> bytes:
    codes = [c for c, _ in frames] + [0] * (DEPTH - len(frames))
    instrs = [i for _, i in frames] + [0] * (DEPTH - len(frames))
    n = len(frames) if depth is None else depth
    return struct.pack(f"<IIII{DEPTH}Q{DEPTH}Q", status, n, 0, 0, *codes, *instrs)


def call_bytes(
    api: int = 1, start: int = 10, end: int = 20, comm: bytes = b"python\0", py: bytes = b""
) -> bytes:
    head = CALL.pack(ZT_EVENT_GPU_CALL, 7, 8, api, start, end, 0x7D00, 4096, -2, 5, 0, comm, 0x4242)
    return head + (py or py_section())


def test_a_call_record_decodes_every_field() -> None:
    sample = decode_gpu_event(call_bytes())
    assert sample == GpuCallSample(
        pid=7,
        tid=8,
        api=api_named("cudaMalloc"),
        start_mono_ns=10,
        end_mono_ns=20,
        address=0x7D00,
        size=4096,
        result=-2,
        stack_id=5,
        comm="python",
        caller=0x4242,
    )


def test_python_frames_travel_leaf_first_with_their_status() -> None:
    frames = [(0x1000, 0x1040), (0, 0), (0x2000, 0x2010)]
    sample = decode_gpu_event(call_bytes(py=py_section(frames, status=PyStatus.OK)))
    assert isinstance(sample, GpuCallSample)
    assert sample.py_status is PyStatus.OK and sample.py_frames == tuple(frames)
    assert call_size(DEPTH) == 88 + 16 + 16 * DEPTH == 872
    small = CALL.pack(ZT_EVENT_GPU_CALL, 1, 1, 6, 0, 0, 0, 0, 0, -14, 0, b"\0", 0)
    small += struct.pack("<IIII4Q4Q", 1, 1, 1, 0, 0xAB, 0, 0, 0, 0xCD, 0, 0, 0)
    got = decode_gpu_event(small, py_depth=4)
    assert isinstance(got, GpuCallSample) and got.py_frames == ((0xAB, 0xCD),) and got.py_truncated


def test_a_library_record_decodes_path_and_stop_flag() -> None:
    raw = LIB.pack(ZT_EVENT_GPU_LIB, 7, 9, 3, 1, 0, 55, 66, b"/opt/cuda/libcudart.so.12\0")
    want = GpuLibSample(7, 9, 3, True, "/opt/cuda/libcudart.so.12", 55, 66)
    assert decode_gpu_event(raw) == want


def test_ring_buffer_padding_is_accepted_but_not_more() -> None:
    assert isinstance(decode_gpu_event(call_bytes() + b"\0" * 7), GpuCallSample)
    with pytest.raises(MalformedEvent, match="expected 872"):
        decode_gpu_event(call_bytes() + b"\0" * 8)
    with pytest.raises(MalformedEvent, match="expected 872"):
        decode_gpu_event(call_bytes()[:871])


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\x10\0", "too short"),
        (struct.pack("<I", 0x42) + bytes(84), "wrong type tag 0x42"),
        (call_bytes(api=99), "unknown GPU api id 99"),
        (call_bytes(start=30, end=20), "precedes"),
        (call_bytes(comm=b"x" * 16), "not NUL-terminated"),
        (call_bytes(py=py_section(depth=49)), "python depth 49"),
        (call_bytes(py=py_section(status=9)), "status 9 out of range"),
    ],
)
def test_malformed_records_say_why(raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedEvent, match=reason):
        decode_gpu_event(raw)


def test_api_table_matches_the_c_ids_and_kinds() -> None:
    assert [a.id for a in GPU_APIS] == list(range(1, 12))
    assert {a.symbol for a in GPU_APIS if a.driver} == {
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemAllocAsync",
        "cuMemFreeAsync",
        "cuLaunchKernel",
    }
    assert [a.symbol for a in GPU_APIS if a.kind is ApiKind.LAUNCH] == [
        "cudaLaunchKernel",
        "cuLaunchKernel",
    ]
    with pytest.raises(KeyError):
        api_named("cudaMemcpy")


@given(st.binary(max_size=900))
def test_any_bytes_decode_or_raise_malformed(raw: bytes) -> None:
    with contextlib.suppress(MalformedEvent):
        decode_gpu_event(raw)


@given(U32, U32, st.integers(1, 11), U64, U64, U64, st.integers(-(2**31), 2**31 - 1))
def test_call_fields_round_trip(
    pid: int, tid: int, api: int, start: int, address: int, size: int, stack: int
) -> None:
    raw = CALL.pack(
        ZT_EVENT_GPU_CALL, pid, tid, api, start, start, address, size, 0, stack, 0, b"\0", 0
    )
    sample = decode_gpu_event(raw + py_section())
    assert isinstance(sample, GpuCallSample)
    assert (
        sample.pid,
        sample.tid,
        sample.api.id,
        sample.address,
        sample.size,
        sample.stack_id,
    ) == (
        pid,
        tid,
        api,
        address,
        size,
        stack,
    )
