"""GPU cost per request through the store and the LLM listing (llm_gpu_cost_store.py)."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import llm_gpu_cost_store
from zerotrace_query.documents import DEVICE_WINDOWS, LLM_REQUESTS, PROFILES
from zerotrace_query.llm_gpu_cost import byte_seconds
from zerotrace_query.llm_search import LlmFilter, list_llm_requests

pytestmark = pytest.mark.unit

S = 1_000_000_000
T0 = 1_700_000_000 * S
NODE, PID = "node-1", 4242
MIB = 1 << 20


def request(rid: str, start_s: int, end_s: int, ttft_s: int, tin: int, tout: int, **kw: Any) -> Any:
    doc = {
        "request_id": rid,
        "span_id": rid,
        "node_id": NODE,
        "pid": PID,
        "service": "vllm",
        "model": "m",
        "observation_point": "SERVER",
        "start_ns": T0 + start_s * S,
        "end_ns": T0 + end_s * S,
        "ttft_ns": ttft_s * S,
        "input_tokens": tin,
        "output_tokens": tout,
    }
    return {**doc, **kw}


def window(kind: str, start_s: int, end_s: int, total: int, pid: int = PID) -> Any:
    return {
        "window_id": f"{kind}:{pid}:{start_s}",
        "node_id": NODE,
        "service": "vllm",
        "pid": pid,
        "profile_type": kind,
        "window_start_ns": T0 + start_s * S,
        "window_end_ns": T0 + end_s * S,
        # As the store holds them (documents.profile_document): a list, not the Avro map.
        "stacks": [
            {"stack": "thread:1;py:step", "weight": total - 1},
            {"stack": "thread:2;py:other", "weight": 1},
        ],
        "samples": 2,
        "dropped": 0,
    }


# The pure test's two requests, in seconds: A [0, 10) first token at 2, 4 in, 9 out;
# B [4, 8) first token at 5, 2 in, 7 out. GPU time 10 and 20 (here s) in [0, 5) and [5, 10).
REQUESTS = [
    request("a", 0, 10, 2, 4, 9),
    request("b", 4, 8, 1, 2, 7),
    request("other-pid", 1, 3, 1, 5, 5, pid=7),  # a process with no GPU windows
    request("client", 1, 3, 1, 5, 5, observation_point="CLIENT"),  # it called out
]
WINDOWS = [
    window("GPU_TIME", 0, 5, 10 * S),
    window("GPU_TIME", 5, 10, 20 * S),
    window("GPU_LAUNCH", 0, 10, 99),
    window("GPU_MEM_INUSE", 0, 10, 8 * MIB),
    window("GPU_TIME", 0, 5, 5 * S, pid=7 + 1),  # another pid's: not read
]
SHARE_A = Fraction(1670, 99)  # of 30 (test_llm_gpu_cost.py)
SHARE_B = Fraction(1300, 99)


def fill(store: DuckDBStore, index: str, docs: list[Any], key: str) -> None:
    store.bulk_upsert(index, [(str(d[key]), d) for d in docs])
    store.refresh(index)


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    store = DuckDBStore()
    for spec in (LLM_REQUESTS, PROFILES, DEVICE_WINDOWS):
        store.ensure_index(spec)
    fill(store, LLM_REQUESTS.name, REQUESTS, "request_id")
    fill(store, PROFILES.name, WINDOWS, "window_id")
    yield store
    store.close()


def listed(store: DuckDBStore, **kw: Any) -> dict[str, Any]:
    answer = list_llm_requests(store, LlmFilter(observation_point="all", **kw))
    return {r["request_id"]: r for r in answer["requests"]}


def test_two_overlapping_requests_get_the_definition_s_shares(store: DuckDBStore) -> None:
    got = listed(store)
    a, b = got["a"], got["b"]
    assert a["gpu_time_ns"] == round(SHARE_A * S) and b["gpu_time_ns"] == round(SHARE_B * S)
    assert a["gpu_time_ns"] + b["gpu_time_ns"] == 30 * S
    # One launch window over [0, 10): A did 4 + 8 = 12 units of work, B 2 + 6 = 8.
    assert a["gpu_launches"] == float(Fraction(99 * 12, 20))
    assert b["gpu_launches"] == float(Fraction(99 * 8, 20))
    # 8 MiB held over 10 s, by the same shares.
    held = byte_seconds(Fraction(8 * MIB * 10 * S))
    assert a["gpu_memory_byte_s"] == float(held * 12 / 20)
    assert a["gpu_cost_method"] == (
        "tokens-processed/v1 time=GPU_TIME launches=GPU_LAUNCH memory=GPU_MEM_INUSE"
    )
    assert "gpu_cost_partial" not in a


def test_requests_of_a_process_without_gpu_windows_get_null(store: DuckDBStore) -> None:
    got = listed(store)
    for rid in ("other-pid", "client"):
        assert {k: got[rid][k] for k in llm_gpu_cost_store.FIELDS} == dict.fromkeys(
            llm_gpu_cost_store.FIELDS
        )


def test_a_page_of_one_request_still_shares_with_the_other(store: DuckDBStore) -> None:
    got = listed(store, limit=1, start_ns_from=T0 + 4 * S, start_ns_to=T0 + 5 * S)
    assert list(got) == ["b"] and got["b"]["gpu_time_ns"] == round(SHARE_B * S)


def test_a_non_streamed_answer_read_from_the_store_is_spread_over_its_span() -> None:
    # A answered whole (`stream` false): its TTFT of 2 s says nothing of prefill, so its
    # 12 units lie evenly over [0, 10): 6 in each window. [0, 5): A 6, B 2 -> 10 s x 6/8;
    # [5, 10): A 6, B 6 -> 20 s x 6/12 (test_llm_gpu_cost.py, the request without a TTFT).
    store = DuckDBStore()
    for spec in (LLM_REQUESTS, PROFILES, DEVICE_WINDOWS):
        store.ensure_index(spec)
    whole = request("a", 0, 10, 2, 4, 9, stream=False)
    fill(store, LLM_REQUESTS.name, [whole, request("b", 4, 8, 1, 2, 7, stream=True)], "request_id")
    fill(store, PROFILES.name, WINDOWS[:2], "window_id")
    got = listed(store)
    assert got["a"]["gpu_time_ns"] == round((Fraction(15, 2) + 10) * S)
    assert got["b"]["gpu_time_ns"] == round((Fraction(5, 2) + 10) * S)
    store.close()


def test_nvml_utilisation_and_memory_stand_in_for_missing_profile_windows() -> None:
    store = DuckDBStore()
    for spec in (LLM_REQUESTS, PROFILES, DEVICE_WINDOWS):
        store.ensure_index(spec)
    fill(store, LLM_REQUESTS.name, REQUESTS[:2], "request_id")
    device = {
        "window_id": "gpu:0",
        "kind": "gpu",
        "node_id": NODE,
        "device": "GPU-0",
        "window_start_ns": T0,
        "window_end_ns": T0 + 10 * S,
        "processes": [
            {"pid": PID, "mean_sm_util_pct": 37.5, "last_used_memory_bytes": 2 * MIB},
            {"pid": 9, "mean_sm_util_pct": 50.0, "last_used_memory_bytes": MIB},
        ],
    }
    fill(store, DEVICE_WINDOWS.name, [device], "window_id")
    got = listed(store)
    # 37.5 % of 10 s = 3.75 s, A 12/20 and B 8/20 of it.
    assert got["a"]["gpu_time_ns"] == 2_250_000_000 and got["b"]["gpu_time_ns"] == 1_500_000_000
    assert got["a"]["gpu_memory_byte_s"] == float(2 * MIB * 10 * Fraction(12, 20))
    assert got["a"]["gpu_launches"] is None
    assert got["a"]["gpu_cost_method"] == (
        "tokens-processed/v1 time=nvml_sm_util memory=nvml_used_memory"
    )
    store.close()
