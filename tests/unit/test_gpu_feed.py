"""Pure tests of the GPU feed's frame assembly and raw.gpu record builder."""

from __future__ import annotations

import pytest

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_collector.gpu_feed import calling_frames, gpu_api_record
from zerotrace_collector.probes.gpu_decode import GpuCallSample, api_named

pytestmark = pytest.mark.unit


def call(api: str = "cudaMalloc", address: int = 0x7D0000000000, result: int = 0) -> GpuCallSample:
    return GpuCallSample(
        pid=41,
        tid=43,
        api=api_named(api),
        start_mono_ns=1_000,
        end_mono_ns=1_500,
        address=address,
        size=7 << 20,
        result=result,
        stack_id=3,
        comm="trainer",
    )


def test_native_only_stack_is_root_first_and_ends_in_the_api() -> None:
    native_leaf_first = [
        "native:cudaMalloc [libcudart.so.12]",  # the probed entry itself
        "native:ffi_call_unix64 [libffi.so.8]",
        "native:main [app]",
    ]
    assert calling_frames(43, "cudaMalloc", native_leaf_first) == [
        "thread:43",
        "native:main [app]",
        "native:ffi_call_unix64 [libffi.so.8]",
        "cuda:cudaMalloc",
    ]


def test_unwind_gone_astray_is_cut_at_the_first_unknown_address() -> None:
    native_leaf_first = [
        "native:cudaMalloc [libcudart.so.12]",
        "native:helper [libx.so]",
        "native:[unknown]+0x7ffdb544acb0",
        "native:main [app]",  # rootwards of garbage: not trusted
    ]
    assert calling_frames(43, "cudaMalloc", native_leaf_first) == [
        "thread:43",
        "native:helper [libx.so]",
        "cuda:cudaMalloc",
    ]


def test_python_frames_lead_and_interpreter_frames_are_dropped() -> None:
    native_leaf_first = [
        "native:cuLaunchKernel [libcuda.so.1]",
        "native:ffi_call [libffi.so.8]",
        "native:_PyEval_EvalFrameDefault [python3.11]",
        "native:main [python3.11]",
    ]
    python_root_first = ["py:main (app.py:10)", "py:launch_kernels (app.py:20)"]
    assert calling_frames(
        43, "cuLaunchKernel", native_leaf_first, python_root_first, "python3.11"
    ) == [
        "thread:43",
        "py:main (app.py:10)",
        "py:launch_kernels (app.py:20)",
        "native:ffi_call [libffi.so.8]",
        "cuda:cuLaunchKernel",
    ]


def test_no_stack_still_names_thread_and_api() -> None:
    assert calling_frames(43, "cudaFree", []) == ["thread:43", "cuda:cudaFree"]


def test_record_fields_and_epoch_times() -> None:
    datum = gpu_api_record(call(), ["thread:43", "cuda:cudaMalloc"], "node-a", 10**18, "c0ffee")
    assert datum == {
        "event_id": f"node-a/41/43/{10**18 + 1000}/cudaMalloc",
        "node_id": "node-a",
        "pid": 41,
        "tid": 43,
        "process_name": "trainer",
        "service": None,
        "container_id": "c0ffee",
        "api": "cudaMalloc",
        "start_ns": 10**18 + 1000,
        "end_ns": 10**18 + 1500,
        "address": 0x7D0000000000,
        "size": 7 << 20,
        "result": 0,
        "stack_id": None,
        "frames": ["thread:43", "cuda:cudaMalloc"],
    }


def test_values_beyond_signed_ranges_keep_their_bits(codec: AvroCodec) -> None:
    datum = gpu_api_record(call(address=2**64 - 512, result=2**32 - 1), [], "n", 0, None)
    assert datum["address"] == -512 and datum["result"] == -1
    record = names.RAW_GPU.record
    assert codec.decode(codec.encode(record, datum)) == (record, datum)
