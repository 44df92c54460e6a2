"""Tumbling windows with per-series watermarks: closing, lateness, the record shape."""

from __future__ import annotations

from typing import Any

from zerotrace_profiler_agg.windows import Key, Series, Windows, folded, record_order

S = 1_000_000_000
A: Series = ("n", 1, "stack")
B: Series = ("n", 2, "stack")
KEY_A: Key = ("n", "svc", 1, "ON_CPU")
KEY_B: Key = ("n", "svc", 2, "ON_CPU")


def feed(
    w: Windows, series: Series, key: Key, ts: int, stack: str = "thread:1;x", weight: int = 1
) -> list[dict[str, Any]]:
    if w.observe(series, ts):
        w.count_late(series, key)
    else:
        w.add(series, key, ts, stack, weight)
    return w.close_due(series)


def test_a_window_closes_when_its_series_passes_end_plus_lateness() -> None:
    w = Windows(width_ns=10 * S, lateness_ns=2 * S)
    assert feed(w, A, KEY_A, 1 * S) == []
    assert feed(w, A, KEY_A, 2 * S, weight=2) == []
    assert feed(w, A, KEY_A, 11 * S, "thread:1;y") == []  # still within the lateness
    [closed] = feed(w, A, KEY_A, 12 * S, "thread:1;y")
    assert closed == {
        "window_id": "n/svc/1/ON_CPU/0",
        "node_id": "n",
        "service": "svc",
        "pid": 1,
        "profile_type": "ON_CPU",
        "window_start_ns": 0,
        "window_end_ns": 10 * S,
        "stacks": {"thread:1;x": 3},
        "samples": 2,
        "dropped": 0,
    }


def test_late_records_are_counted_in_the_window_that_holds_the_watermark() -> None:
    w = Windows(width_ns=10 * S, lateness_ns=0)
    feed(w, A, KEY_A, 5 * S)
    assert len(feed(w, A, KEY_A, 15 * S)) == 1
    assert feed(w, A, KEY_A, 3 * S) == []  # window 0 is out already
    [last] = w.close_all(A)
    assert (last["window_start_ns"], last["samples"], last["dropped"]) == (10 * S, 1, 1)


def test_series_have_their_own_watermarks() -> None:
    w = Windows(width_ns=10 * S, lateness_ns=0)
    feed(w, A, KEY_A, 1 * S)
    feed(w, B, KEY_B, 50 * S)  # far ahead in another process: closes nothing of A
    assert feed(w, A, KEY_A, 2 * S) == []
    assert w.mark(A) == 2 * S
    assert [r["pid"] for r in feed(w, A, KEY_A, 10 * S)] == [1]


def test_a_forgotten_series_keeps_its_watermark() -> None:
    w = Windows(width_ns=10 * S, lateness_ns=0)
    feed(w, A, KEY_A, 1 * S)
    w.raise_mark(A, 30 * S)
    assert len(w.close_due(A)) == 1
    w.forget(A)
    assert not w.has_open(A)
    assert w.observe(A, 5 * S)  # window 0 was emitted: late, not a second record


def test_quiet_watermarks_are_bounded_and_the_oldest_raise_a_floor() -> None:
    w = Windows(width_ns=10 * S, lateness_ns=0)
    w.max_quiet_marks = 3
    for pid in range(10):  # ten short-lived processes, one after the other
        series, key = ("n", pid, "stack"), ("n", "svc", pid, "ON_CPU")
        feed(w, series, key, (10 + 10 * pid) * S)
        w.raise_mark(series, (30 + 10 * pid) * S)
        assert len(w.close_due(series)) == 1
        w.forget(series)
    assert w.marks_evicted == 7 and w.floor == 90 * S
    # A series we no longer know starts from the floor: a record that old is late.
    assert w.observe(("n", 0, "stack"), 20 * S)
    # A new one at the present is not.
    assert not w.observe(("n", 99, "stack"), 200 * S)


def test_folded_stacks_keep_the_frame_format() -> None:
    assert folded(["thread:4", "py:f (a.py:1)", "native:x;y [lib.so]"], 4) == (
        "thread:4;py:f (a.py:1);native:x:y [lib.so]"
    )
    assert folded([], 9) == "thread:9"


def test_records_are_ordered_by_window_then_key() -> None:
    w = Windows(width_ns=10 * S, lateness_ns=0)
    for ts, key in ((25 * S, KEY_B), (3 * S, KEY_B), (4 * S, KEY_A)):
        w.observe(A, ts)
        w.add(A, key, ts, "s", 1)
    out = w.close_all(A)
    assert [(r["window_start_ns"], r["pid"]) for r in out] == [(0, 1), (0, 2), (20 * S, 2)]
    assert out == sorted(out, key=record_order)
