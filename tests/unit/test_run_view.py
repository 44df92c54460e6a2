"""What `zerotrace run` shows (zerotrace_cli/run_view.py): a line per LLM request, the
end-of-run summary that tells "no LLM traffic" from "traffic we could not read", and the live
table redrawn in place. Pure formatting over indexed documents."""

from __future__ import annotations

import pytest

from tests.unit.test_llm_query_documents import MS, llm_request
from zerotrace import names
from zerotrace_cli.llm_view import render_llm_view
from zerotrace_cli.run_view import Summary, draw_live, llm_line

pytestmark = pytest.mark.unit


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
    counters = {"published": 99, "socket.lost": 4, "file-open.lost": 0}
    correlator = {"http.conns.not_http": 2, "http.exchanges": 0}
    assert summary.lines(1, counters, correlator) == [
        "summary: 4 spans (file.open 3, http.request 1; 1 failed), 0 LLM requests, 1 dead letters",
        "  process python3: 3 spans",
        "  process curl: 1 spans",
        "  counted: socket.lost 4",  # losses only: what was published is not a loss
        "  correlator: http.conns.not_http 2",
        "  profiles: OFF_CPU 1 windows (3 samples), ON_CPU 2 windows (200 samples); "
        "see /flamegraph or `zerotrace profile`",
    ]


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
