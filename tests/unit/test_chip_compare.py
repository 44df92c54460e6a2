"""The chip comparison over the store (zerotrace_query/chip_compare.py): per chip model the
compared metrics' sample-weighted mean, min, max and gap share, counters' increases across
window boundaries (a reset counted as Prometheus counts it), XIDs per code, what a model does
not give; the period and node filters, the newest windows read in pages (ties at a page's
edge read once) and the cut said, and the parameters refused with one line."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.device_data import GIB, NS, T0, WINDOW_NS, filled_store, window
from zerotrace_query import chip_compare
from zerotrace_query.chip_compare import (
    HEADLINE,
    ModelsFilter,
    answer,
    chip_comparison,
    compare_windows,
    counter_increase,
    parse_models_query,
)

pytestmark = pytest.mark.unit

H100 = "NVIDIA H100 80GB HBM3"
MI300 = "AMD Instinct MI300X"


def h100(node: str, uuid: str, i: int, util: list[float], **extra: Any) -> dict[str, Any]:
    """An H100 window i: the utilisation samples given, 20 then 40 GiB of 80 used, 400 W and
    then 500 W, 60 C; energy from 1000 + 100 i, rising 50 in the window."""
    counters = extra.pop(
        "counters", {"total_energy_consumption_mj": (1000 + 100 * i, 1050 + 100 * i)}
    )
    return window(
        "gpu",
        node,
        uuid,
        0,
        "gpu",
        T0 + i * WINDOW_NS,
        {
            "gpu_util_pct": util,
            "fb_used_bytes": [20 * GIB, 40 * GIB][: len(util)],
            "fb_total_bytes": [80 * GIB] * len(util),
            "power_w": [400.0, 500.0][: len(util)],
            "temperature_c": [60.0] * len(util),
            "sm_clock_mhz": [1980] * len(util),
        },
        counters,
        vendor="nvidia",
        model=H100,
        driver_version="550.54.15",
        **extra,
    )


def mi300(i: int) -> dict[str, Any]:
    """An MI300X window: no SM clock (unsupported), power 700, the first schema version's
    utilisation field only, ECC double-bit errors that reset between windows 0 and 1."""
    ecc = [(5, 7), (1, 2)][i]
    return window(
        "gpu",
        "node-b",
        "GPU-mi300",
        0,
        "gpu",
        T0 + i * WINDOW_NS,
        {"utilization_pct": [90.0, 100.0], "power_w": [700.0, 700.0], "mem_clock_mhz": [1300]},
        {"ecc_dbe_vol_total": ecc},
        vendor="amd",
        model=MI300,
        unsupported=["sm_clock_mhz"],
    )


def fleet() -> list[dict[str, Any]]:
    return [
        h100("node-a", "GPU-1", 0, [10.0, 30.0]),
        h100(
            "node-a", "GPU-1", 1, [50.0], events=[{"kind": "xid", "code": 79, "ts_ns": T0 + 6 * NS}]
        ),
        h100(
            "node-c",
            "GPU-2",
            1,
            [100.0, 100.0],
            events=[
                {"kind": "xid", "code": 79, "ts_ns": T0 + 7 * NS},
                {"kind": "xid", "code": 48, "ts_ns": T0 + 8 * NS},
            ],
        ),
        mi300(0),
        mi300(1),
    ]


def test_per_model_stats_counters_xids_and_gaps() -> None:
    body = compare_windows(reversed(fleet()))  # any order
    assert body["metrics"] == [*HEADLINE, "mem_clock_mhz", "fb_used_bytes", "fb_total_bytes"]
    assert body["counters"] == ["total_energy_consumption_mj", "ecc_dbe_vol_total"]
    amd, nvidia = body["models"]
    assert (amd["vendor"], amd["model"], amd["devices"], amd["nodes"]) == ("amd", MI300, 1, 1)
    assert (amd["windows"], amd["samples"], amd["driver_versions"]) == (2, 4, [])
    # The first version's utilisation stands in for gpu_util_pct.
    assert amd["metrics"]["gpu_util_pct"] == {
        "mean": 95.0,
        "min": 90.0,
        "max": 100.0,
        "samples": 4,
        "gap_share": 0.0,
    }
    # mem_clock_mhz: one sample of two per window.
    assert amd["metrics"]["mem_clock_mhz"]["gap_share"] == 0.5
    # 5 -> 7 (2), then a reset to 1 (counts 1), then 1 -> 2 (1).
    assert amd["counters"] == {"ecc_dbe_vol_total": {"increase": 4, "devices": 1}}
    assert (amd["xid_count"], amd["xid_codes"]) == (0, [])
    assert amd["unsupported"] == ["sm_clock_mhz"]
    assert amd["not_given"] == [
        "memory_used_pct",
        "temperature_c",
        "sm_clock_mhz",
        "fb_used_bytes",
        "fb_total_bytes",
        "total_energy_consumption_mj",
    ]

    assert (nvidia["devices"], nvidia["nodes"], nvidia["windows"], nvidia["samples"]) == (
        2,
        2,
        3,
        5,
    )
    assert nvidia["driver_versions"] == ["550.54.15"]
    # Samples 10, 30 | 50 | 100, 100: weighted by samples, not by window.
    assert nvidia["metrics"]["gpu_util_pct"] == {
        "mean": 58.0,
        "min": 10.0,
        "max": 100.0,
        "samples": 5,
        "gap_share": 0.0,
    }
    # Used 20, 40 | 20 | 20, 40 GiB of 80: 25 %, 50 %.
    assert nvidia["metrics"]["memory_used_pct"] == {
        "mean": 35.0,
        "min": 25.0,
        "max": 50.0,
        "samples": 5,
        "gap_share": 0.0,
    }
    assert nvidia["metrics"]["power_w"]["mean"] == 440.0
    # GPU-1: 50 + (1100 - 1050) + 50; GPU-2: 50.
    assert nvidia["counters"] == {"total_energy_consumption_mj": {"increase": 200, "devices": 2}}
    assert nvidia["xid_count"] == 3
    assert nvidia["xid_codes"] == [{"code": 48, "count": 1}, {"code": 79, "count": 2}]
    assert nvidia["not_given"] == ["mem_clock_mhz", "ecc_dbe_vol_total"]


def test_counter_increase_of_one_device() -> None:
    def w(first: int, last: int, increase: int) -> dict[str, Any]:
        return {"counters": {"c": {"first": first, "last": last, "increase": increase}}}

    assert counter_increase([w(10, 20, 10), {"counters": {}}, w(25, 30, 5)], "c") == 20
    assert counter_increase([w(10, 20, 10), w(3, 4, 1)], "c") == 14  # reset: counts 3
    assert counter_increase([{"counters": {}}], "c") is None


def test_no_windows_is_no_models_and_every_headline_metric() -> None:
    assert compare_windows([]) == {"metrics": list(HEADLINE), "counters": [], "models": []}


def test_the_period_and_node_from_the_store() -> None:
    store = filled_store(fleet())
    try:
        body = chip_comparison(
            store, ModelsFilter(start_ns_from=T0 + WINDOW_NS, start_ns_to=T0 + 2 * WINDOW_NS)
        )
        assert [(m["model"], m["windows"]) for m in body["models"]] == [(MI300, 1), (H100, 2)]
        assert (body["windows"], body["windows_total"], body["truncated"]) == (3, 3, False)
        assert body["covered_from_ns"] == T0 + WINDOW_NS
        node = chip_comparison(store, ModelsFilter(node="node-c"))
        assert [(m["model"], m["devices"], m["xid_count"]) for m in node["models"]] == [
            (H100, 1, 2)
        ]
        empty = chip_comparison(store, ModelsFilter(start_ns_from=T0 + 10 * WINDOW_NS))
        assert (empty["models"], empty["count"], empty["truncated"]) == ([], 0, False)
    finally:
        store.close()


def test_pages_read_ties_once_and_a_cut_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pages of four: the three windows at T0+W and one at T0, then the other at T0.
    monkeypatch.setattr(chip_compare, "MAX_LIMIT", 4)
    store = filled_store(fleet())
    try:
        whole = chip_comparison(store, ModelsFilter())
        assert (whole["windows"], whole["truncated"]) == (5, False)
        assert whole["models"] == compare_windows(fleet())["models"]
        cut = chip_comparison(store, ModelsFilter(limit=3))
        assert (cut["windows"], cut["windows_total"], cut["truncated"]) == (3, 5, True)
        assert cut["covered_from_ns"] == T0 + WINDOW_NS
        assert cut["warning"] == (
            "5 GPU windows matched; the comparison covers the newest 3:"
            " narrow the time range or filter by node"
        )
        # Pages of two: more windows start at T0+W than a page holds; it stops, and says so.
        monkeypatch.setattr(chip_compare, "MAX_LIMIT", 2)
        stuck = chip_comparison(store, ModelsFilter())
        assert (stuck["windows"], stuck["windows_total"], stuck["truncated"]) == (2, 5, True)
    finally:
        store.close()


def test_parameters() -> None:
    assert parse_models_query(f"from={T0}&to={T0 + NS}&node=n&limit=5") == ModelsFilter(
        "n", T0, T0 + NS, 5
    )
    assert parse_models_query("") == ModelsFilter()
    store = filled_store([])
    try:
        for query, error in (
            ("device=x", "unknown query parameter 'device'; known: from, limit, node, to"),
            ("from=x", "query parameter 'from' must be an integer"),
            ("limit=50001", "'limit' must be between 1 and 50000"),
            (f"from={T0}&to={T0}", "'to' must be after 'from'"),
            ("a=%zz&&", "malformed query string 'a=%zz&&'"),
        ):
            assert answer(store, query) == (400, {"error": error})
    finally:
        store.close()
