"""The terminal view of LLM requests (zerotrace_cli.llm_view): a pure renderer."""

from __future__ import annotations

from tests.unit.test_llm_query_documents import MS, S, llm_request, realistic_requests
from zerotrace_cli.llm_view import EMPTY, render_llm_view, summary_line

T0 = 1_700_000_000 * S  # 22:13:20 UTC


def test_table_and_summary() -> None:
    requests = [
        llm_request(request_id="a", start_ns=T0, ttft_ns=150 * MS, tpot_ns=21_500_000),
        llm_request(
            request_id="b",
            start_ns=T0 + 1_500 * MS,
            service="sglang-router-eu-west",
            model="qwen2.5-32b-instruct-awq-long-name",
            observation_point="CLIENT",
            output_tokens=40,
            output_tokens_estimated=True,
            tokens_per_s=None,
            tpot_ns=None,
        ),
        llm_request(
            request_id="c",
            start_ns=T0 + 2 * S,
            status_code=503,
            error="HTTP 503: overloaded",
            ttft_ns=None,
            output_tokens=None,
            endpoint="completions",
            observation_point="NETWORK",
        ),
    ]
    assert render_llm_view(requests).splitlines() == [
        "TIME         SERVICE    MODEL                  ENDPOINT         AT     TTFT ms TPOT ms"
        " OUT TOK  TOK/S STATUS",
        "22:13:22.000 vllm       llama-3.1-8b-instruct  completions      net          -    20.0"
        "       -   50.0 503 HTTP 503: overloaded",
        "22:13:21.500 sglang-ro… qwen2.5-32b-instruct-… chat.completions client     120       -"
        "     ~40      - 200 stop",
        "22:13:20.000 vllm       llama-3.1-8b-instruct  chat.completions server     150    21.5"
        "      95   50.0 200 stop",
        "",
        "llama-3.1-8b-instruct:                 2 requests (1 failed)  TTFT p50/p99 150/150 ms"
        "  TPOT p50/p99 21.5/21.5 ms  tok/s p50 50.0",
        "qwen2.5-32b-instruct-awq-long-name:    1 requests (0 failed)  TTFT p50/p99 120/120 ms"
        "  TPOT p50/p99 -/- ms  tok/s p50 -",
    ]


def test_rows_width_and_empty() -> None:
    requests = realistic_requests(T0, 50)
    text = render_llm_view(requests, rows=5, width=80)
    lines = text.splitlines()
    assert len(lines) == 1 + 5 + 1 + 3
    assert all(len(line) <= 80 for line in lines)
    newest = max(requests, key=lambda r: r["start_ns"])
    assert lines[1].startswith(render_llm_view([newest]).splitlines()[1][:12])
    assert render_llm_view([]) == EMPTY
    assert summary_line("m", []).startswith("m:    0 requests (0 failed)")
