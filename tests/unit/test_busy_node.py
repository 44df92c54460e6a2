"""The figures of bench/busy_node.py: profile windows folded for the workload's pid, counters
from zerotrace's summary (JSON or printed), /proc stat times, its cost, the checks and the
table. No root, no eBPF: the runs themselves are not made here."""

from __future__ import annotations

import pytest

from bench.busy_node import (
    Cost,
    Run,
    Seen,
    Truth,
    checks,
    cost_of,
    counted,
    flatten,
    losses,
    main,
    render,
    seen_in,
    stat_cpu_s,
)

pytestmark = pytest.mark.unit

HOT = "thread:7;py:<module> (k.py:90);py:outer (k.py:40);py:middle (k.py:36);py:hot_loop (k.py:31)"
NATIVE = "thread:7;py:call_native (k.py:44);native:__memcmp_avx2_movbe [libc.so.6]"
EARLY = "thread:7;native:python3.11+0x557cbf;native:_PyEval_EvalFrameDefault [python3.11]"
WAIT = "thread:7;py:main (k.py:80);py:wait_for_backend (k.py:49);kernel:schedule"


def window(kind: str, stacks: dict[str, int], pid: int = 7, dropped: int = 0) -> dict[str, object]:
    return {"pid": pid, "profile_type": kind, "stacks": stacks, "dropped": dropped}


def test_windows_give_kept_samples_python_share_and_the_sleep_seen() -> None:
    docs = [
        window("ON_CPU", {HOT: 90, NATIVE: 6, EARLY: 4}, dropped=1),
        # As the store gives them back: a list of {stack, weight}.
        {**window("OFF_CPU", {}), "stacks": [{"stack": WAIT, "weight": 2_000_000_000}]},
        window("OFF_CPU", {"thread:7;native:read [libc.so.6]": 5_000_000}),
        window("ON_CPU", {HOT: 1000}, pid=8),  # another process
    ]
    seen = seen_in(docs, 7)
    assert (seen.on_cpu, seen.python, seen.wait_ns) == (100, 96, 2_000_000_000)
    assert (seen.windows, seen.dropped) == (3, 1)
    assert seen.without_python == {EARLY: 4}  # its last three frames


def test_counters_from_the_json_and_from_either_printed_summary() -> None:
    assert flatten({"profile": {"lost": 2, "shed": 1}, "socket": {"lost": 0}, "x": True}) == {
        "profile.lost": 2,
        "profile.shed": 1,
        "socket.lost": 0,
    }
    per_feed = [
        "summary: 0 spans (none; 0 failed), 0 LLM requests, 0 dead letters",
        "  process python3: 12 spans",
        "  profile: lost 3, shed 0, news_lost 1, python_processes 1",
        "  socket: lost 0, shed 5",
        "  profiles: OFF_CPU 1 windows (452 samples), ON_CPU 1 windows (165 samples); see it",
        "  zerotrace itself: 0.9 s CPU over 8.5 s (0.10 core; budget 0.5 core) plus 8.6 s",
    ]
    found = counted(per_feed)
    assert found == {
        "profile.lost": 3,
        "profile.shed": 0,
        "profile.news_lost": 1,
        "profile.python_processes": 1,
        "socket.lost": 0,
        "socket.shed": 5,
    }
    assert losses(found) == (4, 5)
    older = ["summary: 0 spans", "  counted: backpressure 0, profile.lost 7, profile.py_x 2"]
    assert counted(older) == {"backpressure": 0, "profile.lost": 7, "profile.py_x": 2}
    assert counted(["zerotrace: compiling"]) is None  # killed before its summary


def test_stat_times_are_read_after_the_name() -> None:
    line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 3 4 20 0 9 0 77 1 2"
    assert stat_cpu_s(line, 100) == pytest.approx(3.0)


def test_cost_from_the_summary_json_or_from_proc_less_the_start_up() -> None:
    summary = {"self": {"cpu_s": 1.5, "wall_s": 20.0, "start_cpu_s": 6.0}, "budget": None}
    assert cost_of(summary, 99.0, 99.0, None, 0.5) == Cost(1.5, 20.0, 0.5, 6.0)
    held = {**summary, "budget": {"cores": 0.25, "enforced_by": "cgroup v2 cpu.max"}}
    cost = cost_of(held, 99.0, 99.0, None, 0.5)
    assert cost is not None and cost.budget_cores == 0.25
    assert cost_of(None, 8.0, 30.0, (10.0, 5.0), 0.5) == Cost(3.0, 20.0, 0.5, 5.0)
    assert cost_of(None, 8.0, 30.0, None, 0.5) == Cost(8.0, 30.0, 0.5)
    assert cost_of(None, None, 30.0, None, 0.5) is None  # gone before a single reading


def good_run() -> Run:
    return Run(
        "quiet",
        0,
        truth=Truth(pid=7, cpu_s=10.0, slept_s=2.0, wall_s=15.0),
        seen=Seen(on_cpu=960, python=950, wait_ns=2_100_000_000),
        counters={"profile.lost": 0, "profile.shed": 0},
        cost=Cost(2.0, 20.0, 0.5, 6.0),
        exit_code=0,
    )


def test_checks_pass_a_good_run_at_the_edges_of_the_targets() -> None:
    by_name = {c.name: c for c in checks(good_run(), 100)}
    assert by_name["samples expected"].figure == "1,000"
    assert by_name["samples kept"].figure == "960 96.0%"
    assert by_name["off-CPU wait/slept"].figure == "2.10/2.00 s +5.0%"
    assert by_name["zerotrace CPU"].figure == "2.0/20 s 0.10 c"
    assert all(c.ok for c in by_name.values() if c.ok is not None)


def test_checks_miss_what_a_starved_zerotrace_leaves() -> None:
    run = good_run()
    run.seen = Seen(on_cpu=300, python=200, wait_ns=1_000_000_000, dropped=4)
    run.counters = {"profile.lost": 12, "profile.shed": 3}
    run.cost = Cost(12.0, 20.0, 0.5)
    missed = {c.name for c in checks(run, 100) if c.ok is False}
    assert missed == {
        "samples kept",
        "with Python frames",
        "off-CPU wait/slept",
        "lost",
        "zerotrace CPU",
    }


def test_a_killed_run_is_a_miss_on_every_figure_it_lacks() -> None:
    run = Run("busy", 2, truth=good_run().truth, killed_after_s=195.0)
    by_name = {c.name: c for c in checks(run, 97)}
    assert by_name["zerotrace finished"].figure == "killed at 195 s"
    assert all(c.ok is False for c in by_name.values() if c.ok is not None)
    assert by_name["lost"].figure == "?"


def test_the_table_puts_the_runs_side_by_side_with_a_verdict_each() -> None:
    busy = good_run()
    busy.mode, busy.neighbours = "busy", 2
    busy.counters = {"profile.lost": 5}
    lines = render([good_run(), busy], 100)
    assert "quiet (0 neighbours)" in lines[0] and "busy (2 neighbours)" in lines[0]
    kept = next(line for line in lines if line.startswith("samples kept"))
    assert kept.count("PASS") == 2 and kept.endswith(">= 95 %")
    lost = next(line for line in lines if line.startswith("lost"))
    assert lost.split()[1:] == ["0", "PASS", "5", "MISS", "0"]
    assert lines[-2] == "quiet: 6 of 6 targets: PASS"
    assert lines[-1] == "busy: 5 of 6 targets: MISS (lost)"


def test_arguments_out_of_range_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--seconds", "0"])
    assert exit_.value.code == 2
    assert "must be positive" in capsys.readouterr().err
