from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_profiler_agg.windows import WindowFolder

S = 1_000_000_000


def sample(ts: int, frames: list[str], weight: int = 1, service: str = "train") -> dict[str, Any]:
    return {
        "node_id": "n",
        "process_name": service,
        "profile_type": "ON_CPU",
        "ts_ns": ts,
        "weight": weight,
        "frames": frames,
    }


def test_windows_close_after_lateness_and_fold_stacks() -> None:
    folder = WindowFolder(width_ns=10 * S, lateness_ns=2 * S)
    assert folder.add(sample(1 * S, ["main", "step"])) == []
    assert folder.add(sample(2 * S, ["main", "step"], weight=2)) == []
    assert folder.add(sample(11 * S, ["main", "io"])) == []  # window 0 still open (lateness)
    [closed] = folder.add(sample(12 * S, ["main", "io"]))
    assert closed["window_start_ns"] == 0 and closed["window_end_ns"] == 10 * S
    assert closed["stacks"] == {"main;step": 3}
    assert closed["samples"] == 2
    assert folder.add(sample(3 * S, ["late"])) == []
    assert folder.late_samples == 1
    [rest] = folder.flush()
    assert rest["stacks"] == {"main;io": 2}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.sampled_from(["a", "b", "c"]), st.integers(1, 5)),
        max_size=60,
    )
)
def test_in_order_input_loses_no_weight(events: list[tuple[int, str, int]]) -> None:
    folder = WindowFolder(width_ns=10 * S, lateness_ns=0)
    out = []
    for ts, frame, weight in sorted(events):
        out += folder.add(sample(ts * S, [frame], weight))
    out += folder.flush()
    assert sum(sum(w["stacks"].values()) for w in out) == sum(w for _, _, w in events)
    assert folder.late_samples == 0
