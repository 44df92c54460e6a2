"""What `zerotrace run` shows (zerotrace_cli/run_view.py): a line per LLM request, the
end-of-run summary that tells "no LLM traffic" from "traffic we could not read", shows each
feed's losses (zeros included) and what zerotrace itself cost, the same as a JSON object, and
the live table redrawn in place. Pure formatting over indexed documents."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_llm_query_documents import MS, llm_request
from zerotrace import names
from zerotrace.cpu_budget import CpuBudget
from zerotrace.self_cost import CostSnapshot
from zerotrace_cli.llm_view import render_llm_view
from zerotrace_cli.run_view import Summary, by_feed, draw_live, feed_lines, llm_line

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def span(
    kind: str = "file.open", process: str = "python3", status: str = "OK"
) -> dict[str, object]:
    return {"kind": kind, "process_name": process, "status": status}


def profile(kind: str, samples: int) -> dict[str, object]:
    return {"profile_type": kind, "samples": samples}


def test_an_llm_line_gives_the_request_its_latencies_and_outcome() -> None:
    assert llm_line(llm_request()) == (
        "LLM vllm llama-3.1-8b-instruct chat.completions stream ttft=120.0ms tpot=20.0ms "
        "tokens=95 stop"
    )
    failed = llm_request(
        stream=False, ttft_ns=None, tpot_ns=None, output_tokens=None, error="HTTP 503: busy"
    )
    assert llm_line(failed).endswith("no-stream ttft=- tpot=- tokens=None HTTP 503: busy")
    guessed = llm_request(output_tokens=7, output_tokens_estimated=True, ttft_ns=1_250_000)
    assert " ttft=1.2ms " in llm_line(guessed) and " tokens=~7 " in llm_line(guessed)


def test_an_empty_run_says_so() -> None:
    assert Summary().lines(0, {"published": 0}, {}) == [
        "summary: 0 spans (none; 0 failed), 0 LLM requests, 0 dead letters"
    ]


def test_the_summary_counts_spans_losses_correlator_limits_and_profiles() -> None:
    summary = Summary()
    for doc in (span(), span(), span(status="ERROR", process="curl"), span(kind="http.request")):
        summary.add(names.INDEX_SPANS, doc)
    summary.add(names.INDEX_PROFILES, profile("ON_CPU", 120))
    summary.add(names.INDEX_PROFILES, profile("ON_CPU", 80))
    summary.add(names.INDEX_PROFILES, profile("OFF_CPU", 3))
    counters = {"published": 99, "socket.lost": 4, "socket.truncated": 0, "file-open.lost": 0}
    correlator = {"http.conns.not_http": 2, "http.exchanges": 0}
    assert summary.lines(1, counters, correlator) == [
        "summary: 4 spans (file.open 3, http.request 1; 1 failed), 0 LLM requests, 1 dead letters",
        "  process python3: 3 spans",
        "  process curl: 1 spans",
        "  socket: lost 4, shed 0",  # lost and shed even at 0; other counts when not 0
        "  file-open: lost 0, shed 0",
        "  correlator: http.conns.not_http 2",
        "  profiles: OFF_CPU 1 windows (3 samples), ON_CPU 2 windows (200 samples); "
        "see /flamegraph or `zerotrace profile`",
    ]


def test_a_span_made_again_replaces_the_one_counted() -> None:
    summary = Summary()
    summary.add(names.INDEX_SPANS, {**span(), "span_id": "a"})
    summary.add(names.INDEX_SPANS, {**span(), "span_id": "b"})
    # "a" again, now failed (its connection's set-up arrived after it): counted once.
    summary.add(names.INDEX_SPANS, {**span(status="ERROR", process="curl"), "span_id": "a"})
    assert summary.lines(0, {}, {})[:3] == [
        "summary: 2 spans (file.open 2; 1 failed), 0 LLM requests, 0 dead letters",
        "  process python3: 1 spans",
        "  process curl: 1 spans",
    ]


def test_counters_are_grouped_by_feed_the_collectors_own_apart() -> None:
    counters = {"published": 9, "backpressure": 0, "profile.shed": 3, "profile.off_cpu_full": 1}
    assert by_feed(counters) == {
        "collector": {"published": 9, "backpressure": 0},
        "profile": {"shed": 3, "off_cpu_full": 1},
    }
    assert feed_lines(counters) == ["profile: lost 0, shed 3, off_cpu_full 1"]
    assert feed_lines({"published": 9, "backpressure": 2}) == ["collector: backpressure 2"]


def test_the_summary_ends_with_what_zerotrace_itself_cost() -> None:
    cost = CostSnapshot(12.3, 60.0, 180 * MIB, 210 * MIB, start_cpu_s=2.0)
    budget = CpuBudget(0.5, "cgroup v1 cpu.cfs_quota_us", "")
    counters = {"published": 74_064, "events": 74_064, "profile.lost": 0}
    lines = Summary().lines(0, counters, {}, cost=cost, budget=budget, indexed=72_000)
    assert lines[1:] == [
        "  profile: lost 0, shed 0",
        "  zerotrace itself: 12.3 s CPU over 60.0 s (0.21 core; budget 0.5 core, cgroup v1 "
        "cpu.cfs_quota_us) plus 2.0 s starting, RSS 180 MiB (peak 210 MiB); events in 1,234/s, "
        "out 1,200/s",
    ]


def test_the_summary_as_a_json_object() -> None:
    summary = Summary()
    summary.add(names.INDEX_SPANS, span(status="ERROR"))
    summary.add(names.INDEX_LLM, llm_request())
    summary.add(names.INDEX_PROFILES, profile("ON_CPU", 120))
    summary.add(names.INDEX_PROFILES, profile("OFF_CPU", 3))
    for edge_id, parent, rule in (
        ("e1", "p", names.TRACE_RULE_SAME_THREAD),
        ("e2", "p", names.TRACE_RULE_TCP_SEQ),
        ("e1", "", names.TRACE_RULE_SAME_THREAD),  # taken back: replaces e1
    ):
        summary.add(
            names.INDEX_TRACE_EDGES, {"edge_id": edge_id, "parent_span_id": parent, "rule": rule}
        )
    cost = CostSnapshot(3.0, 10.0, 100 * MIB, 120 * MIB, start_cpu_s=1.5)
    # 100 records carrying 500 events (SocketBatch records carry many): rates count events.
    counters = {
        "published": 100,
        "events": 500,
        "backpressure": 0,
        "socket.lost": 2,
        "socket.shed": 0,
    }
    document = summary.document(
        1,
        counters,
        {"http.exchanges": 1},
        cost=cost,
        budget=CpuBudget(0.5, None, "not enforced"),
        indexed=400,
    )
    assert json.loads(json.dumps(document)) == {
        "spans": 1,
        "failed_spans": 1,
        "llm_requests": 1,
        "dead_letters": 1,
        "indexed": 400,
        "profile_samples": {"OFF_CPU": 3, "ON_CPU": 120},
        "trace_links": {names.TRACE_RULE_TCP_SEQ: 1},
        "counters": {
            "collector": {"published": 100, "events": 500, "backpressure": 0},
            "socket": {"lost": 2, "shed": 0},
        },
        "correlator": {"http.exchanges": 1},
        "self": {
            "cpu_s": 3.0,
            "start_cpu_s": 1.5,
            "wall_s": 10.0,
            "rss_bytes": 100 * MIB,
            "peak_rss_bytes": 120 * MIB,
            "events_in_per_s": 50.0,
            "events_out_per_s": 40.0,
        },
        "budget": {"cores": 0.5, "enforced_by": None},
    }
    assert Summary().document(0, {}, {}, cost=cost, budget=None, indexed=0)["budget"] is None


def test_llm_requests_end_the_summary_with_their_table() -> None:
    summary = Summary()
    requests = [llm_request(request_id=f"r{i}", start_ns=i * 100 * MS) for i in range(3)]
    for doc in requests:
        summary.add(names.INDEX_LLM, doc)
    lines = summary.lines(0, {}, {})
    assert lines[0] == "summary: 0 spans (none; 0 failed), 3 LLM requests, 0 dead letters"
    assert lines[1:] == ["", render_llm_view(requests, rows=20)]
    assert summary.spans == 0 and summary.by_kind == {}


def test_the_live_view_redraws_in_place(capsys: pytest.CaptureFixture[str]) -> None:
    summary = Summary()
    summary.add(names.INDEX_SPANS, span())
    summary.add(names.INDEX_LLM, llm_request())
    draw_live(summary, 12.4)
    out = capsys.readouterr().out
    assert out.startswith("\x1b[H\x1b[2Jzerotrace run  12s  1 spans  1 LLM requests\n\n")
    assert out.endswith(render_llm_view([llm_request()], rows=20) + "\n")
