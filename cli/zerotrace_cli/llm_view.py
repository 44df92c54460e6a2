"""The terminal view of LLM requests (pure): a fixed-width table of the most recent requests
and one summary line per model, from zerotrace.derived.LlmRequest dicts. `zerotrace run`
redraws it for a live view; the numbers follow the query service's conventions (nearest-rank
percentiles over successful requests, zerotrace_query.llm_stats)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

from zerotrace_query.llm_stats import is_error, percentile

EMPTY = "no LLM requests yet: send your server an OpenAI-compatible request"
_POINT = {"CLIENT": "client", "SERVER": "server", "NETWORK": "net"}


def _fit(text: str, width: int) -> str:
    """Cut to `width` characters, marking a cut with an ellipsis."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _ms(ns: object) -> str:
    if ns is None:
        return "-"
    ms = float(ns) / 1e6  # type: ignore[arg-type]
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}"


def _number(value: object) -> str:
    return "-" if value is None else f"{float(value):.1f}"  # type: ignore[arg-type]


def _tokens(request: Mapping[str, Any]) -> str:
    count = request.get("output_tokens")
    if count is None:
        return "-"
    return f"~{count}" if request.get("output_tokens_estimated") else str(count)


def _status(request: Mapping[str, Any]) -> str:
    code = request.get("status_code")
    head = str(code) if code is not None else ("error" if is_error(request) else "ok")
    tail = request.get("error") if is_error(request) else request.get("finish_reason")
    return f"{head} {tail}" if tail else head


# (header, width, right-aligned, cell): the table's columns; the last takes what is left.
Column = tuple[str, int, bool, Callable[[Mapping[str, Any], tzinfo], str]]
COLUMNS: tuple[Column, ...] = (
    (
        "TIME",
        12,
        False,
        lambda r, tz: datetime.fromtimestamp(int(r["start_ns"]) / 1e9, tz).strftime("%H:%M:%S.%f")[
            :12
        ],
    ),
    ("SERVICE", 10, False, lambda r, _: str(r.get("service", ""))),
    ("MODEL", 22, False, lambda r, _: str(r.get("model", ""))),
    ("ENDPOINT", 16, False, lambda r, _: str(r.get("endpoint", ""))),
    ("AT", 6, False, lambda r, _: _POINT.get(str(r.get("observation_point")), "?")),
    ("TTFT ms", 7, True, lambda r, _: _ms(r.get("ttft_ns"))),
    ("TPOT ms", 7, True, lambda r, _: _ms(r.get("tpot_ns"))),
    ("OUT TOK", 7, True, lambda r, _: _tokens(r)),
    ("TOK/S", 6, True, lambda r, _: _number(r.get("tokens_per_s"))),
    ("STATUS", 0, False, lambda r, _: _status(r)),
)


def _row(cells: Sequence[str], width: int) -> str:
    parts = []
    for (_, size, right, _), text in zip(COLUMNS, cells, strict=True):
        if size:
            text = _fit(text, size)
            parts.append(text.rjust(size) if right else text.ljust(size))
        else:
            parts.append(text)
    return _fit(" ".join(parts).rstrip(), width)


def summary_line(model: str, requests: Sequence[Mapping[str, Any]], pad: int = 0) -> str:
    """`model: N requests (E failed)  TTFT p50/p99 a/b ms  TPOT p50/p99 c/d ms  tok/s p50 x`."""
    ok = [r for r in requests if not is_error(r)]

    def pair(name: str) -> str:
        values = [float(r[name]) for r in ok if r.get(name) is not None]
        return f"{_ms(percentile(values, 50))}/{_ms(percentile(values, 99))} ms"

    rates = [float(r["tokens_per_s"]) for r in ok if r.get("tokens_per_s") is not None]
    failed = len(requests) - len(ok)
    return (
        f"{model + ':':<{pad + 1}} {len(requests):>4} requests ({failed} failed)"
        f"  TTFT p50/p99 {pair('ttft_ns')}  TPOT p50/p99 {pair('tpot_ns')}"
        f"  tok/s p50 {_number(percentile(rates, 50))}"
    )


def render_llm_view(
    requests: Sequence[Mapping[str, Any]],
    rows: int = 15,
    width: int = 132,
    tz: tzinfo = UTC,
) -> str:
    """The newest `rows` requests as a table (newest first; `~` marks output tokens counted
    from stream events rather than reported usage, `-` a value the traffic did not show), then
    one summary line per model over all `requests`. Every line is at most `width` long."""
    if not requests:
        return EMPTY
    newest = sorted(requests, key=lambda r: int(r["start_ns"]), reverse=True)[:rows]
    lines = [_row([c[0] for c in COLUMNS], width)]
    lines += [_row([c[3](r, tz) for c in COLUMNS], width) for r in newest]
    by_model: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for request in requests:
        by_model[str(request.get("model", ""))].append(request)
    lines.append("")
    pad = max(len(m) for m in by_model)
    lines += [_fit(summary_line(m, g, pad), width) for m, g in sorted(by_model.items())]
    return "\n".join(lines)
