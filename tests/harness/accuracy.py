"""Compare zerotrace's LLM records with the clients' own truth (tests/harness/llm_load.py).

The tolerance is the issue's: 2 ms or 2 %, whichever is larger, for TTFT and TPOT at the
client-side observation point; token counts exact.

One allowance, for the truth's own uncertainty, measured by the client itself: it stamps the
time just before its send call and again when it returns, and for every read it notes how
long it ran or sat runnable without a CPU (/proc/thread-self/schedstat) after it started,
how long the kernel says the bytes had been waiting in the socket (TCP_INFO, counted in
ticks, so used only beyond two), and, on plain TCP sockets, when the kernel received the
newest bytes the read returned (SO_TIMESTAMPNS): the one measure that also covers the
hypervisor running another guest (steal time, in neither schedstat figure). On a busy 2-core
machine the scheduler sometimes makes a client wait for milliseconds, and a page fault or a
hypervisor can stall it as long: the request then left at some moment of the send window, and
a token reached the socket up to that time before the client saw it. A figure that matches any
moment of these windows (within the tolerance) is counted as right; `uncertain` lists such
requests, so a report can say how many there were.

At the NETWORK observation point (a capture between the two ends) a token may also wait
between the wire and the client's socket (on loopback: in the kernel's receive softirq, which
a loaded machine defers for milliseconds, where no client-side measure sees it). There the
server's own stamps (tests/harness/openai_server.py --truth) bound the figure from below: the
wire carries a token no earlier than the server's send began, and the request no later than
the server's app got it. `compare(..., server=...)` widens the lower ends to those bounds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TOLERANCE_NS = 2_000_000
TOLERANCE_RATIO = 0.02


def within(measured: int, truth: float) -> bool:
    return abs(measured - truth) <= max(TOLERANCE_NS, TOLERANCE_RATIO * abs(truth))


def truth_ttft(t: Mapping[str, Any]) -> int:
    return int(t["token_ns"][0] - t["sent_ns"])


def truth_tpot(t: Mapping[str, Any]) -> float | None:
    tokens = int(t["output_tokens"])
    if not t["stream"] or tokens < 2 or len(t["token_ns"]) < 2:
        return None
    return float(t["token_ns"][-1] - t["token_ns"][0]) / (tokens - 1)


def compare(
    truths: Iterable[Mapping[str, Any]],
    records: Iterable[Mapping[str, Any]],
    observation_point: str = "CLIENT",
    server: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Every disagreement, one line each; empty means every request matched. *server*: the
    server's stamps by model, for a point between the two ends (see the module's doc)."""
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        if record.get("observation_point") == observation_point:
            by_model.setdefault(str(record["model"]), []).append(record)
    problems = []
    for t in truths:
        name = t["model"]
        if t["error"]:
            problems.append(f"{name}: the client itself failed: {t['error']}")
            continue
        found = by_model.get(name, [])
        if len(found) != 1:
            problems.append(f"{name}: {len(found)} records at {observation_point}, expected 1")
            continue
        r = found[0]
        if r.get("error"):
            problems.append(f"{name}: zerotrace says error {r['error']!r}")
        if r.get("output_tokens") != t["output_tokens"]:
            problems.append(f"{name}: tokens {r.get('output_tokens')} != {t['output_tokens']}")
        ttft = truth_ttft(t)
        low, high = ttft_window(t)
        stamps = (server or {}).get(name)
        if stamps is not None:
            low = min(low, int(stamps["first_ns"]) - int(stamps["request_ns"]))
        measured = r.get("ttft_ns")
        if measured is None or not (
            within(int(measured), ttft) or low - TOLERANCE_NS <= int(measured) <= high
        ):
            problems.append(f"{name}: TTFT {measured} vs truth {ttft} (window {low}..{high})")
        tpot = truth_tpot(t)
        if tpot is not None:
            got = r.get("tpot_ns")
            low_f, high_f = tpot_window(t)
            if stamps is not None:
                low_f, high_f = wire_tpot_window(t, stamps, low_f, high_f)
            if got is None or not (
                within(int(got), tpot) or low_f - TOLERANCE_NS <= int(got) <= high_f + TOLERANCE_NS
            ):
                problems.append(f"{name}: TPOT {got} vs truth {tpot:.0f}")
    return problems


def _waits(t: Mapping[str, Any]) -> list[int]:
    return list(t.get("token_wait_ns") or [0] * len(t["token_ns"]))


def ttft_window(t: Mapping[str, Any]) -> tuple[int, int]:
    """The TTFT the client's own uncertainty allows: the first token reached the socket up
    to its read's busy time before the stamp; the request left within the send window."""
    first, wait = int(t["token_ns"][0]), _waits(t)[0]
    sent_done = max(int(t["sent_done_ns"]), int(t["sent_ns"]))
    return first - wait - sent_done, first - int(t["sent_ns"])


def tpot_window(t: Mapping[str, Any]) -> tuple[float, float]:
    tokens = int(t["output_tokens"]) - 1
    waits = _waits(t)
    first, last = int(t["token_ns"][0]), int(t["token_ns"][-1])
    return ((last - waits[-1] - first) / tokens, (last - (first - waits[0])) / tokens)


def wire_tpot_window(
    t: Mapping[str, Any], stamps: Mapping[str, Any], low: float, high: float
) -> tuple[float, float]:
    """The TPOT window widened to what a point between the ends can see: its first token
    lies between the server's first send and the client's first read, its last between the
    server's last send and the client's last read."""
    tokens = int(t["output_tokens"]) - 1
    first, last = int(t["token_ns"][0]), int(t["token_ns"][-1])
    return (
        min(low, (int(stamps["last_ns"]) - first) / tokens),
        max(high, (last - int(stamps["first_ns"])) / tokens),
    )


def uncertain(truths: Iterable[Mapping[str, Any]]) -> list[str]:
    """Requests whose client was descheduled for more than the tolerance while sending."""
    return [
        t["model"]
        for t in truths
        if t["sent_done_ns"] - t["sent_ns"] > TOLERANCE_NS
        or any(w > TOLERANCE_NS for w in _waits(t))
    ]


def worst_errors(
    truths: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]]
) -> dict[str, float]:
    """Largest absolute TTFT and TPOT differences in ms, for reports."""
    by_model = {str(r["model"]): r for r in records if r.get("observation_point") == "CLIENT"}
    ttft = tpot = 0.0
    for t in truths:
        r = by_model.get(t["model"])
        if r is None or t["error"] or r.get("ttft_ns") is None:
            continue
        ttft = max(ttft, abs(int(r["ttft_ns"]) - truth_ttft(t)) / 1e6)
        truth = truth_tpot(t)
        if truth is not None and r.get("tpot_ns") is not None:
            tpot = max(tpot, abs(int(r["tpot_ns"]) - truth) / 1e6)
    return {"ttft_ms": ttft, "tpot_ms": tpot}
